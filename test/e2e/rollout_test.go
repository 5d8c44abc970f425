package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/chaos"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// rollout is a fleet of Quartermaster's processes (two workers, two
// watchers, two APIs) and the provisions that arrive through its APIs
// while its processes are replaced one at a time: a rolling update, or an
// upgrade to another release's binary. It records each provision's time
// from its 202 to the instance's success.
type rollout struct {
	t      *testing.T
	f      *fleet
	s      *testenv.System
	kube   *testenv.Cluster
	planID string

	mu       sync.Mutex
	accepted map[string]time.Time
	took     map[string]time.Duration
}

// newRollout starts the fleet from the binary qm, each process with the
// extra arguments of its kind, and registers the plan whose provisions
// apply rollingObjects ConfigMaps; the fleet's APIs serve it when it
// returns.
func newRollout(t *testing.T, e processEnv, qm string, extra map[string][]string) *rollout {
	t.Helper()
	r := &rollout{t: t, s: e.s, kube: e.kube, accepted: map[string]time.Time{}, took: map[string]time.Duration{},
		f: &fleet{t: t, qm: qm, ns: e.s.Namespace, procs: map[string][]*process{}, common: e.common, extra: extra,
			env: []string{"QM_OSB_USERNAME=" + testenv.OSBCredentials.Username, "QM_OSB_PASSWORD=" + testenv.OSBCredentials.Password}}}
	for _, kind := range []string{"worker", "worker", "watcher", "watcher", "api", "api"} {
		r.f.start(kind)
	}
	r.serve()
	return r
}

// newServiceRollout is a rollout of processes the test runs otherwise (the
// chart's pods), whose provisions go through one address, a Service's.
func newServiceRollout(t *testing.T, s *testenv.System, url string) *rollout {
	t.Helper()
	r := &rollout{t: t, s: s, kube: s.Kube, accepted: map[string]time.Time{}, took: map[string]time.Duration{},
		f: &fleet{t: t, ns: s.Namespace, procs: map[string][]*process{}, apis: []string{url}}}
	r.serve()
	return r
}

// serve registers the plan whose provisions apply rollingObjects
// ConfigMaps, waits until the APIs serve it, and records the provisions'
// times until the test ends.
func (r *rollout) serve() {
	t := r.t
	t.Helper()
	r.planID = r.s.Plan("rolling", "  manager: {async: true}\n", rollingTemplates)
	for i := range len(r.f.apis) {
		require.Eventually(t, func() bool {
			status, body, _ := testenv.HTTP(http.MethodGet, r.f.api(i)+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
			return status == http.StatusOK && strings.Contains(body, r.planID)
		}, 30*time.Second, 20*time.Millisecond, "the APIs serve the plan")
	}
	stop, observed := make(chan struct{}), make(chan struct{})
	go func() { defer close(observed); r.observe(stop) }()
	t.Cleanup(func() { close(stop); <-observed })
}

// observe records when each accepted provision's instance succeeds, until
// stop is closed.
func (r *rollout) observe(stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		var list osbv1alpha1.SFServiceInstanceList
		if err := r.kube.Client.List(ctx, &list, ctrlclient.InNamespace(r.s.Namespace)); err != nil {
			continue
		}
		now := time.Now()
		r.mu.Lock()
		for _, inst := range list.Items {
			if at, ok := r.accepted[inst.Name]; ok && r.took[inst.Name] == 0 && testenv.Succeeded(1)(&inst) {
				r.took[inst.Name] = now.Sub(at)
			}
		}
		r.mu.Unlock()
	}
}

// provisionAll provisions n instances named prefix-i at rollingRate a
// second, each through an API in turn, retrying as a platform does (on the
// other API) while one is going away.
func (r *rollout) provisionAll(prefix string, n int) error {
	body := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, r.s.ServiceID, r.planID)
	return paced(n, func(i int) error {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		// A retry after an answer lost with a replaced API finds the
		// instance being provisioned (202) or, provisions being quick,
		// provisioned already (200): both are OSB's success.
		if err := putRetrying(r.f, "/v2/service_instances/"+name+"?accepts_incomplete=true", body, i, http.StatusAccepted, http.StatusOK); err != nil {
			return err
		}
		r.mu.Lock()
		r.accepted[name] = time.Now()
		r.mu.Unlock()
		return nil
	})
}

// waitAll waits until the n provisions named prefix-i succeeded, and
// returns their times.
func (r *rollout) waitAll(prefix string, n int) []time.Duration {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		done := 0
		for name := range r.took {
			if strings.HasPrefix(name, prefix+"-") {
				done++
			}
		}
		return done == n
	}, 5*time.Minute, 100*time.Millisecond, "every %s provision succeeds", prefix)
	r.mu.Lock()
	defer r.mu.Unlock()
	var ds []time.Duration
	for name, d := range r.took {
		if strings.HasPrefix(name, prefix+"-") {
			ds = append(ds, d)
		}
	}
	return ds
}

// baseline provisions n instances named prefix-i without restarts and
// returns their times.
func (r *rollout) baseline(prefix string, n int) []time.Duration {
	r.t.Helper()
	require.NoError(r.t, r.provisionAll(prefix, n))
	return r.waitAll(prefix, n)
}

// roll replaces every process, one at a time and kind after kind
// (workers, watchers, APIs, each by SIGTERM as a Deployment's rolling
// update does), by one of the binary qm, while rollingProvisions
// provisions named prefix-i arrive; it returns their times. routed, when
// set, is called once the first worker of qm polls, as an operator routes
// Temporal to its build.
func (r *rollout) roll(prefix, qm string, routed func()) []time.Duration {
	r.t.Helper()
	r.f.mu.Lock()
	r.f.qm = qm
	r.f.mu.Unlock()
	provisioned := make(chan error, 1)
	rollStart := time.Now()
	go func() { provisioned <- r.provisionAll(prefix, rollingProvisions) }()
	// One replacement every rollingEvery, from the first seconds of the
	// provisions to their last, so that each finds provisions in flight.
	pace := time.NewTicker(rollingEvery)
	defer pace.Stop()
	for _, kind := range []string{"worker", "watcher", "api"} {
		for i := range 2 {
			<-pace.C
			r.f.replace(kind)
			if kind == "worker" && i == 0 && routed != nil {
				routed()
			}
		}
	}
	r.t.Logf("%s: the replacements took %s; the provisions arrive over %ds", prefix, time.Since(rollStart).Round(time.Second), rollingProvisions/rollingRate)
	require.NoError(r.t, <-provisioned)
	return r.waitAll(prefix, rollingProvisions)
}

// checkStall checks that no provision of a roll took more than
// rollingSlack longer than the slowest of the baseline, and logs the
// figures and what held the slowest; it returns the longest stall.
//
// loadBeside says that more work ran beside the roll's provisions than
// beside the baseline's (an upgrade step's mass update and binds): the
// provisions then queue behind it, all of them, and the step's median,
// when it is the slower, is what a provision took without a stall. A
// stall is still what one provision waits beyond the others: a task lost
// with a stopped worker, say, which waits out its timeout.
func (r *rollout) checkStall(prefix string, baseline, rolling []time.Duration, loadBeside bool) time.Duration {
	r.t.Helper()
	slowest, median := slices.Max(baseline), chaos.Percentile(rolling, 50)
	reference, against := slowest, "without restarts"
	if loadBeside && median > slowest {
		reference, against = median, "the median of the step (the work beside it queues every provision)"
	}
	stall := max(slices.Max(rolling)-reference, 0)
	r.t.Logf("%s: provision time without restarts: p50 %s, max %s; during the replacements: p50 %s, p99 %s, max %s; longest stall %s", prefix,
		chaos.Percentile(baseline, 50).Round(time.Millisecond), slowest.Round(time.Millisecond),
		median.Round(time.Millisecond), chaos.Percentile(rolling, 99).Round(time.Millisecond),
		slices.Max(rolling).Round(time.Millisecond), stall.Round(time.Millisecond))
	assert.LessOrEqual(r.t, slices.Max(rolling), reference+rollingSlack, "%s: no provision takes more than %s longer than %s", prefix, rollingSlack, against)
	// What held the slowest provision: a workflow task that timed out is a
	// task lost with a stopped worker or its cancelled poll.
	r.mu.Lock()
	var slow string
	var slowTook time.Duration
	for name, d := range r.took {
		if strings.HasPrefix(name, prefix+"-") && d > slowTook {
			slow, slowTook = name, d
		}
	}
	r.mu.Unlock()
	slowID := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: r.s.Namespace, Name: slow})
	timeouts := 0
	for _, ev := range r.s.History(slowID, r.s.ClosedRun(slowID, runs.WorkflowType(lifecycle.OpProvision))).GetEvents() {
		if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT {
			timeouts++
		}
	}
	r.t.Logf("%s: the slowest provision, %s, took %s; its run has %d workflow task timeouts", prefix, slow, slowTook.Round(time.Millisecond), timeouts)
	return stall
}

// checkOnce checks that nothing of the provisions named prefix-i was lost,
// stuck or duplicated: each has its objects once, and one run did its work.
func (r *rollout) checkOnce(prefix string) {
	r.t.Helper()
	var cms corev1.ConfigMapList
	require.NoError(r.t, r.kube.Client.List(context.Background(), &cms, ctrlclient.InNamespace(r.s.Namespace)))
	objects := map[string]int{}
	for _, cm := range cms.Items {
		objects[cm.Name]++
	}
	for i := range rollingProvisions {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		for j := range rollingObjects {
			assert.Equal(r.t, 1, objects[fmt.Sprintf("%s-%d", name, j)], "%s has its object %d, once", name, j)
		}
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: r.s.Namespace, Name: name})
		working, idle := r.s.WorkingRuns(r.t, id)
		assert.Equal(r.t, 1, working, "%s did its work in one run", id)
		if idle > 0 {
			r.t.Logf("%s: %d more runs found the work done (a start repeated after a failover)", id, idle)
		}
	}
}
