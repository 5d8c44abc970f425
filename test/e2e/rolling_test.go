package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// The rolling update's size: rollingProvisions provisions at rollingRate a
// second while every process is replaced, and as many before, at the same
// pace, without restarts, for the baseline. The baseline is the same
// workload so that its slowest provision carries the same load: on a busy
// machine 200 provisions of 20 objects queue where 40 did not, and a
// shorter baseline counted that queue as the restarts' stall.
const (
	rollingProvisions  = 200
	baselineProvisions = rollingProvisions
	rollingRate        = 5
	// rollingEvery paces the six replacements over the provisions.
	rollingEvery = rollingProvisions / rollingRate * time.Second / 7
	// rollingSlack is how much longer than without restarts an operation
	// may take: one workflow task timeout, and 5 s. The dev server (Temporal
	// 1.29) cannot complete a stopping worker's polls, so the SDK cancels
	// them itself, and a task the server hands to one at that instant waits
	// out its timeout (temporalio/sdk-go#2199; the Temporal cluster, 1.31,
	// completes them: internal/temporalcluster). A stall beyond that is the
	// restarts' own.
	rollingSlack = runs.WorkflowTaskTimeout + 5*time.Second
	// rollingObjects is how many ConfigMaps a provision applies: enough
	// that an apply lasts a while, so that a worker told to stop holds
	// applies in hand.
	rollingObjects = 20
)

// rollingTemplates render rollingObjects ConfigMaps, then succeed.
var rollingTemplates = fmt.Sprintf(`  - action: provision
    type: gotemplate
    content: |
      {{- range $i := until %d }}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ $.instance.metadata.name }}-{{ $i }}}
      data: {}
      {{- end }}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
`, rollingObjects)

// fleet is the processes of a rolling update: two of each kind, each
// replaced by a new one under the next name.
type fleet struct {
	t      *testing.T
	qm     string
	common []string
	env    []string
	ns     string
	mu     sync.Mutex
	procs  map[string][]*process // by kind
	apis   []string              // the addresses of the APIs now serving
	next   int
}

func (f *fleet) start(kind string) *process {
	f.t.Helper()
	f.next++
	name := fmt.Sprintf("%s-%d", kind, f.next)
	args := []string{kind, "--health-addr", "0", "--metrics-addr", "0"}
	switch kind {
	case "watcher":
		args = append(args, "--leader-election-namespace", f.ns, "--leader-elect-lease-duration", "6s",
			"--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", "1s")
	case "api":
		args = []string{"api", "--listen", "127.0.0.1:0", "--namespace", f.ns}
	}
	var health string
	if kind == "watcher" {
		// A standby logs nothing until it leads: its health endpoint
		// says that it runs.
		health = "127.0.0.1:" + freePorts(f.t, 1)[0]
		args[2] = health
	}
	p := start(f.t, f.qm, name, f.env, append(args, f.common...)...)
	switch kind {
	case "worker":
		waitFor(f.t, p, "Started Worker", time.Minute)
	case "watcher":
		require.Eventually(f.t, func() bool {
			status, _, _ := testenv.HTTP(http.MethodGet, "http://"+health+"/healthz", "", nil, nil)
			return status == http.StatusOK
		}, time.Minute, 50*time.Millisecond, "%s is healthy", name)
	case "api":
		waitFor(f.t, p, "serving the API", time.Minute)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[kind] = append(f.procs[kind], p)
	if kind == "api" {
		f.apis = append(f.apis, p.address(f.t))
	}
	return p
}

// replace sends SIGTERM to the oldest process of kind, waits until it has
// left, and starts its successor.
func (f *fleet) replace(kind string) {
	f.t.Helper()
	f.mu.Lock()
	old := f.procs[kind][0]
	f.procs[kind] = f.procs[kind][1:]
	if kind == "api" {
		f.apis = f.apis[1:]
	}
	f.mu.Unlock()
	require.NoError(f.t, old.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-old.done:
	case <-time.After(time.Minute):
		require.Fail(f.t, "the process did not leave within a minute of SIGTERM", old.name)
	}
	f.start(kind)
}

// provision asks an API (the try-th in turn) to provision name, and again
// on the other one while the answer is a refused connection or a 5xx, as
// a platform does; accepted records the 202.
func provision(f *fleet, name, serviceID, planID string, try int, accepted func(string)) error {
	body := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, serviceID, planID)
	deadline := time.Now().Add(time.Minute)
	for ; ; try++ {
		status, got, _ := testenv.HTTP(http.MethodPut, f.api(try)+"/v2/service_instances/"+name+"?accepts_incomplete=true", body, &testenv.OSBCredentials, testenv.OSBHeader)
		if status == http.StatusAccepted {
			accepted(name)
			return nil
		}
		if status != 0 && status < 500 || time.Now().After(deadline) {
			return fmt.Errorf("PUT %s: %d %s", name, status, got)
		}
		time.Sleep(100 * time.Millisecond) // a platform's retry pace
	}
}

// api is the address of an API now serving, in turn.
func (f *fleet) api(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apis[i%len(f.apis)]
}

// TestRollingUpdateUnderLoad replaces every process of Quartermaster, one at
// a time and kind after kind (workers, watchers, APIs, each by SIGTERM as a
// Deployment's rolling update does), while provisions arrive through OSB.
// Nothing is lost, stuck or duplicated, and no provision takes more than
// rollingSlack longer than the slowest of a baseline run without restarts.
func TestRollingUpdateUnderLoad(t *testing.T) {
	e := newProcessEnv(t)
	kube, s := e.kube, e.s
	ctx := context.Background()
	f := &fleet{t: t, qm: e.qm, ns: s.Namespace, procs: map[string][]*process{}, common: e.common,
		env: []string{"QM_OSB_USERNAME=" + testenv.OSBCredentials.Username, "QM_OSB_PASSWORD=" + testenv.OSBCredentials.Password}}
	for _, kind := range []string{"worker", "worker", "watcher", "watcher", "api", "api"} {
		f.start(kind)
	}
	planID := s.Plan("rolling", "  manager: {async: true}\n", rollingTemplates)
	for i := range 2 {
		require.Eventually(t, func() bool {
			status, body, _ := testenv.HTTP(http.MethodGet, f.api(i)+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
			return status == http.StatusOK && strings.Contains(body, planID)
		}, 30*time.Second, 20*time.Millisecond, "the APIs serve the plan")
	}

	// Each provision's time, from its 202 to the instance's success.
	var mu sync.Mutex
	accepted := map[string]time.Time{}
	took := map[string]time.Duration{}
	observe := func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var list osbv1alpha1.SFServiceInstanceList
			if err := kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)); err != nil {
				continue
			}
			now := time.Now()
			mu.Lock()
			for _, inst := range list.Items {
				if at, ok := accepted[inst.Name]; ok && took[inst.Name] == 0 && testenv.Succeeded(1)(&inst) {
					took[inst.Name] = now.Sub(at)
				}
			}
			mu.Unlock()
		}
	}
	// provisionAll provisions n instances named prefix-i at rollingRate a
	// second, each through an API in turn, retrying as a platform does (on
	// the other API) while one is going away. It needs no test handle: the
	// rolling update's provisions run beside the test goroutine.
	provisionAll := func(prefix string, n int) error {
		begin := time.Now()
		errs := make(chan error, n)
		for i := range n {
			go func() {
				time.Sleep(time.Until(begin.Add(time.Duration(i) * time.Second / rollingRate))) // the workload's pace
				errs <- provision(f, fmt.Sprintf("%s-%03d", prefix, i), s.ServiceID, planID, i, func(name string) {
					mu.Lock()
					accepted[name] = time.Now()
					mu.Unlock()
				})
			}()
		}
		var all []error
		for range n {
			if err := <-errs; err != nil {
				all = append(all, err)
			}
		}
		return errors.Join(all...)
	}
	waitAll := func(prefix string, n int) []time.Duration {
		t.Helper()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			done := 0
			for name := range took {
				if strings.HasPrefix(name, prefix+"-") {
					done++
				}
			}
			return done == n
		}, 5*time.Minute, 100*time.Millisecond, "every %s provision succeeds", prefix)
		mu.Lock()
		defer mu.Unlock()
		var ds []time.Duration
		for name, d := range took {
			if strings.HasPrefix(name, prefix+"-") {
				ds = append(ds, d)
			}
		}
		return ds
	}
	stop := make(chan struct{})
	observed := make(chan struct{})
	go func() { defer close(observed); observe(stop) }()
	defer func() { close(stop); <-observed }()

	require.NoError(t, provisionAll("base", baselineProvisions))
	baseline := waitAll("base", baselineProvisions)

	// The rolling update, while the provisions arrive.
	provisioned := make(chan error, 1)
	rollStart := time.Now()
	go func() { provisioned <- provisionAll("roll", rollingProvisions) }()
	// One replacement every rollingEvery, from the first seconds of the
	// provisions to their last, so that each finds provisions in flight.
	next := rollStart
	for _, kind := range []string{"worker", "watcher", "api"} {
		for range 2 {
			next = next.Add(rollingEvery)
			time.Sleep(time.Until(next)) // the rolling update's pace
			f.replace(kind)
		}
	}
	t.Logf("the rolling update took %s; the provisions arrive over %ds", time.Since(rollStart).Round(time.Second), rollingProvisions/rollingRate)
	require.NoError(t, <-provisioned)
	rolling := waitAll("roll", rollingProvisions)

	slowest := slices.Max(baseline)
	t.Logf("provision time without restarts: p50 %s, max %s; during the rolling update: p50 %s, p99 %s, max %s; longest stall %s",
		chaos.Percentile(baseline, 50).Round(time.Millisecond), slowest.Round(time.Millisecond),
		chaos.Percentile(rolling, 50).Round(time.Millisecond), chaos.Percentile(rolling, 99).Round(time.Millisecond),
		slices.Max(rolling).Round(time.Millisecond), max(slices.Max(rolling)-slowest, 0).Round(time.Millisecond))
	assert.LessOrEqual(t, slices.Max(rolling), slowest+rollingSlack, "no provision takes more than %s longer than without restarts", rollingSlack)
	// What held the slowest provision: a workflow task that timed out is a
	// task lost with a stopped worker or its cancelled poll.
	mu.Lock()
	var slow string
	var slowTook time.Duration
	for name, d := range took {
		if strings.HasPrefix(name, "roll-") && d > slowTook {
			slow, slowTook = name, d
		}
	}
	mu.Unlock()
	slowID := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: slow})
	timeouts := 0
	for _, ev := range s.History(slowID, s.ClosedRun(slowID, runs.WorkflowType(lifecycle.OpProvision))).GetEvents() {
		if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT {
			timeouts++
		}
	}
	t.Logf("the slowest provision, %s, took %s; its run has %d workflow task timeouts", slow, slowTook.Round(time.Millisecond), timeouts)

	// Nothing lost, stuck or duplicated: one object and one run each.
	var cms corev1.ConfigMapList
	require.NoError(t, kube.Client.List(ctx, &cms, ctrlclient.InNamespace(s.Namespace)))
	objects := map[string]int{}
	for _, cm := range cms.Items {
		objects[cm.Name]++
	}
	for i := range rollingProvisions {
		name := fmt.Sprintf("roll-%03d", i)
		for j := range rollingObjects {
			assert.Equal(t, 1, objects[fmt.Sprintf("%s-%d", name, j)], "%s has its object %d, once", name, j)
		}
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: name})
		working, idle := s.WorkingRuns(t, id)
		assert.Equal(t, 1, working, "%s did its work in one run", id)
		if idle > 0 {
			t.Logf("%s: %d more runs found the work done (a start repeated after a failover)", id, idle)
		}
	}
}
