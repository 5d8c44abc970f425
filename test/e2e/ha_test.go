package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/workflows/runs"
)

// process is a qm process of a test.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *testenv.SyncBuffer
	done chan struct{}
}

// haProvisions is how many instances the watcher failover happens among.
const haProvisions = 100

// The watchers' leader election in TestHighAvailability.
const (
	leaseDuration = 6 * time.Second
	retryPeriod   = time.Second
)

// TestHighAvailability runs Quartermaster as a cluster would, as separate
// processes: two watchers (one leads, through a Lease), two workers, two
// APIs. SIGKILL of the leading watcher in the middle of 100 provisions: the
// other takes the lease once it has run out (no sooner than one lease
// duration after the last renewal, and sooner than two: a few retry
// periods late at most), and every instance succeeds with one run each. SIGKILL of a worker: the other finishes its
// work. Two APIs serve one instance's whole OSB lifecycle, with each request
// going to the other one.
func TestHighAvailability(t *testing.T) {
	e := newProcessEnv(t)
	qm, kube, s, common := e.qm, e.kube, e.s, e.common
	ns := s.Namespace
	async := s.Plan("async", "  manager: {async: true}\n", testenv.Templates("instant"))
	sync := s.Plan("sync", "", testenv.Templates("instant"))

	// Leader election as fast as a test wants it; the chart keeps the defaults.
	election := []string{"--leader-elect-lease-duration", leaseDuration.String(), "--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", retryPeriod.String()}
	watcher := func(name string) *process {
		args := append([]string{"watcher", "--leader-election-namespace", ns, "--health-addr", "0", "--metrics-addr", "0"}, election...)
		return start(t, qm, name, nil, append(args, common...)...)
	}
	worker := func(name string) *process {
		return start(t, qm, name, nil, append([]string{"worker", "--health-addr", "0", "--metrics-addr", "0"}, common...)...)
	}
	workers := []*process{worker("worker-1"), worker("worker-2")}
	first := watcher("watcher-1")
	lease := func() coordinationv1.LeaseSpec { return leaseSpec(kube, ns, starter.LeaseName) }
	holder := func() string { return ptr.Deref(lease().HolderIdentity, "") }
	require.Eventually(t, func() bool { return holder() != "" }, 30*time.Second, 50*time.Millisecond, "the first watcher takes the lease")
	firstHolder := holder()
	watcher("watcher-2") // the standby

	// 100 provisions, as kubectl users create them: half before the leader
	// dies, half while no one leads, which only the standby can start.
	create := func(from, to int) {
		names := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			names = append(names, fmt.Sprintf("ha-%03d", i))
		}
		createInstances(t, kube.Client, s, async, "", names)
	}
	succeeded := func() int {
		n, err := succeededIn(kube.Client, ns, "ha-")
		if err != nil {
			t.Logf("listing the instances: %v", err) // counted as none done; the next poll lists again
		}
		return n
	}
	create(0, haProvisions/2)
	require.Eventually(t, func() bool { return succeeded() > 0 }, time.Minute, 5*time.Millisecond, "provisions run")
	before := lease()
	first.kill(t)
	create(haProvisions/2, haProvisions)
	t.Logf("SIGKILL of the leading watcher with %d of %d provisions done", succeeded(), haProvisions)
	require.Eventually(t, func() bool { h := holder(); return h != "" && h != firstHolder }, time.Minute, 20*time.Millisecond,
		"the standby watcher takes the lease")
	after := lease()
	// The standby sees the last renewal up to a retry period late, and tries
	// again every retry period (with client-go's jitter of 1.2).
	takeover := after.AcquireTime.Sub(before.RenewTime.Time)
	t.Logf("the standby leads %s after the dead leader's last renewal (lease duration %s)", takeover.Round(time.Millisecond), leaseDuration)
	assert.GreaterOrEqual(t, takeover, leaseDuration, "no one takes a lease before it runs out")
	// Generous: a loaded two-core machine under the race detector may be
	// slow to retry; what the bound rules out is a lease that is never
	// given up, or one waited out twice.
	assert.Less(t, takeover, 2*leaseDuration, "the lease changes hands once it runs out")

	workers[0].kill(t)
	t.Logf("SIGKILL of a worker with %d of %d provisions done", succeeded(), haProvisions)
	require.Eventually(t, func() bool { return succeeded() == haProvisions }, 3*time.Minute, 100*time.Millisecond,
		"every instance succeeds with one watcher and one worker left (%d did)", succeeded())
	for i := range haProvisions {
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: ns, Name: fmt.Sprintf("ha-%03d", i)})
		working, idle := s.WorkingRuns(t, id)
		assert.Equal(t, 1, working, "%s did its work in one run", id)
		if idle > 0 {
			t.Logf("%s: %d more runs found the work done (a start repeated after a failover)", id, idle)
		}
	}

	// Two APIs, each request to the other one.
	env := []string{"QM_OSB_USERNAME=" + testenv.OSBCredentials.Username, "QM_OSB_PASSWORD=" + testenv.OSBCredentials.Password}
	apis := []string{
		start(t, qm, "api-1", env, append([]string{"api", "--listen", "127.0.0.1:0", "--namespace", ns}, common...)...).address(t),
		start(t, qm, "api-2", env, append([]string{"api", "--listen", "127.0.0.1:0", "--namespace", ns}, common...)...).address(t),
	}
	turn := 0
	expect := func(method, path, body string, status int, want string) {
		t.Helper()
		s.URL = apis[turn%2]
		turn++
		s.Expect(method, path, body, status, want)
	}
	inst := "/v2/service_instances/ha-api"
	for _, a := range apis {
		require.Eventually(t, func() bool {
			status, body, _ := testenv.HTTP(http.MethodGet, a+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
			return status == http.StatusOK && strings.Contains(body, sync)
		}, 30*time.Second, 20*time.Millisecond, "%s serves the catalog", a)
	}
	expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, sync), http.StatusCreated, `{}`)
	expect(http.MethodPut, inst+"/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, sync), http.StatusCreated, `{"credentials": {"user": "u"}}`)
	expect(http.MethodGet, inst+"/service_bindings/b-1", "", http.StatusOK, "")
	expect(http.MethodDelete, fmt.Sprintf("%s/service_bindings/b-1?service_id=%s&plan_id=%s", inst, s.ServiceID, sync), "", http.StatusOK, `{}`)
	expect(http.MethodDelete, fmt.Sprintf("%s?service_id=%s&plan_id=%s", inst, s.ServiceID, sync), "", http.StatusOK, `{}`)
	s.URL = apis[turn%2]
	s.ExpectSoon(inst, http.StatusNotFound, `{"description": "instance \"ha-api\" does not exist"}`)
}

// createInstances creates the instances names of plan in s's namespace at
// once, as kubectl users would; on cluster, when it is not empty.
func createInstances(t testing.TB, c ctrlclient.Client, s *testenv.System, plan, cluster string, names []string) {
	testenv.Parallel(t, len(names), func(i int) error {
		return c.Create(context.Background(), &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: s.Namespace},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: names[i], ServiceID: s.ServiceID, PlanID: plan, ClusterID: cluster},
		})
	})
}

// succeededIn counts the instances of ns named prefix... whose provision
// succeeded.
func succeededIn(c ctrlclient.Client, ns, prefix string) (int, error) {
	var list osbv1alpha1.SFServiceInstanceList
	if err := c.List(context.Background(), &list, ctrlclient.InNamespace(ns)); err != nil {
		return 0, fmt.Errorf("listing the instances: %w", err)
	}
	n := 0
	for _, inst := range list.Items {
		if strings.HasPrefix(inst.Name, prefix) && testenv.Succeeded(1)(&inst) {
			n++
		}
	}
	return n, nil
}

// start runs qm with args until the test ends; env is added to the test's
// environment. Its output is shown if the test fails.
func start(t testing.TB, qm, name string, env []string, args ...string) *process {
	t.Helper()
	p, err := startLogged(t, qm, name, env, &testenv.SyncBuffer{}, args...)
	require.NoError(t, err)
	return p
}

// startLogged is start, writing to log (a restarted process adds to the
// log of the one before), returning its error.
func startLogged(t testing.TB, qm, name string, env []string, log *testenv.SyncBuffer, args ...string) (*process, error) {
	p, err := launch(qm, name, env, log, args...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { p.stop(t) })
	return p, nil
}

// leaseSpec is the Lease ns/name as it is now: empty while there is none
// (a poll asks again).
func leaseSpec(kube *testenv.Cluster, ns, name string) coordinationv1.LeaseSpec {
	var l coordinationv1.Lease
	if err := kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		return coordinationv1.LeaseSpec{}
	}
	return l.Spec
}

// launch starts qm with args as the process name, its output in log. It
// needs no test handle, so that the chaos run's fault goroutine can restart
// a process.
func launch(qm, name string, env []string, log *testenv.SyncBuffer, args ...string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(qm, args...), log: log, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop ends the process with SIGTERM (SIGKILL after 20 s) and, if the test
// failed, shows the end of its output. It runs from a cleanup.
func (p *process) stop(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if t.Failed() {
		t.Logf("--- output of %s:\n%s", p.name, tail(p.log.String(), 40))
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (p *process) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
}

var servedAt = regexp.MustCompile(`msg="serving the API" address=(127\.0\.0\.1:\d+)`)

// address waits until an API process says where it serves.
func (p *process) address(t *testing.T) string {
	t.Helper()
	var addr string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := servedAt.FindStringSubmatch(p.log.String())
		require.Len(c, m, 2, "%s logs its address", p.name)
		addr = "http://" + m[1]
	}, 30*time.Second, 20*time.Millisecond)
	return addr
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
