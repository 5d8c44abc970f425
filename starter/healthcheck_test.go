package starter_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// checkMinute is a health check's minute in these tests: "minutes: 1"
// checks every two seconds.
const checkMinute = 2 * time.Second

// flipWithin is how soon a flip must show in a test: one interval, and a
// margin for a shared two-core machine under the race detector. The
// promise itself (a flip within one interval and a tick) is what
// BenchmarkHealthChecks measures.
const flipWithin = checkMinute + 30*time.Second

// registered creates a RegisteredService in the System's namespace with
// the given healthcheck (YAML under spec.healthcheck, "" for none).
func registered(t *testing.T, s *testenv.System, name, healthcheck string) {
	t.Helper()
	check := ""
	if healthcheck != "" {
		check = "  healthcheck:\n" + healthcheck
	}
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity:
  - {name: type, value: test}
  serviceEndpointDefinition:
  - {name: host, value: 127.0.0.1}
%s`, name, s.Namespace, check))
}

// waitService waits until the service is in state, and returns it.
func waitService(t *testing.T, s *testenv.System, name string, state primazav1alpha1.ServiceState, within time.Duration) *primazav1alpha1.RegisteredService {
	t.Helper()
	var svc primazav1alpha1.RegisteredService
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &svc))
		assert.Equal(c, state, svc.Status.State)
	}, within, 50*time.Millisecond, "RegisteredService %s becomes %s", name, state)
	return &svc
}

// waitChecked waits until the RegisteredService named name is in state
// after a check: a new service is Unknown before its first check too.
func waitChecked(t *testing.T, s *testenv.System, name string, state primazav1alpha1.ServiceState, within time.Duration) *primazav1alpha1.RegisteredService {
	t.Helper()
	var svc primazav1alpha1.RegisteredService
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &svc))
		assert.Equal(c, state, svc.Status.State)
		assert.NotNil(c, svc.Status.HealthCheck, "checked at least once")
	}, within, 50*time.Millisecond, "RegisteredService %s becomes %s after a check", name, state)
	return &svc
}

// switchable is a TCP listener on a fixed port that can be closed and
// opened again.
type switchable struct {
	t    *testing.T
	addr string
	ln   net.Listener
	srv  *http.Server
	up   atomic.Bool
	// hits counts the connections accepted: the checks that reached it.
	hits atomic.Int64
}

func listen(t *testing.T) *switchable {
	l := &switchable{t: t, addr: "127.0.0.1:0"}
	l.open()
	l.addr = l.ln.Addr().String()
	t.Cleanup(l.close)
	return l
}

func (l *switchable) port() string { _, p, _ := net.SplitHostPort(l.addr); return p }

func (l *switchable) open() {
	ln, err := net.Listen("tcp", l.addr)
	require.NoError(l.t, err)
	l.ln, l.srv = ln, &http.Server{ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			l.hits.Add(1)
		}
	}, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = l.srv.Serve(ln) }()
	l.up.Store(true)
}

func (l *switchable) close() {
	if l.up.Swap(false) {
		_ = l.srv.Close()
	}
}

// TestHealthChecksTCPAndHTTP: tcp and http checks against a listener that
// the test stops and starts flip their services Available → Unreachable →
// Available, each within an interval plus 10 s; checks that agree write
// nothing; each flip is an Event.
func TestHealthChecksTCPAndHTTP(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	l := listen(t)
	registered(t, s, "tcp", fmt.Sprintf(`    tcp: {host: 127.0.0.1, port: %s, minutes: 1, timeoutSeconds: 1}`, l.port()))
	registered(t, s, "http", fmt.Sprintf(`    http: {url: "http://%s/healthz", expectedStatus: 204, minutes: 1, timeoutSeconds: 1}`, l.addr))
	registered(t, s, "tcp-from-endpoint", fmt.Sprintf(`    tcp: {fromEndpoint: {host: host}, port: %s, minutes: 1}`, l.port()))

	for _, name := range []string{"tcp", "http", "tcp-from-endpoint"} {
		svc := waitService(t, s, name, primazav1alpha1.ServiceAvailable, flipWithin)
		assert.Equal(t, primazav1alpha1.CheckSucceeded, svc.Status.HealthCheck.LastResult)
		assert.Equal(t, svc.Generation, svc.Status.ObservedGeneration)
		assert.NotContains(t, svc.Finalizers, "healthcheck.quartermaster.io/jobs", "a check without Jobs holds no deletion")
		c := meta.FindStatusCondition(svc.Status.Conditions, healthcheck.ConditionHealthy)
		require.NotNil(t, c)
		assert.Equal(t, "CheckSucceeded", c.Reason)
	}
	http := waitService(t, s, "http", primazav1alpha1.ServiceAvailable, flipWithin)
	assert.Equal(t, "GET http://"+l.addr+"/healthz answered 204", http.Status.HealthCheck.Message)

	// Agreeing checks write nothing: over the next checks of all three
	// services, the status stays as it was.
	before, hits := http.ResourceVersion, l.hits.Load()
	// Three rounds of three checks; how soon is flipWithin's margin, as
	// each round waits on the worker like a flip does.
	require.Eventually(t, func() bool { return l.hits.Load() >= hits+9 }, 2*checkMinute+flipWithin, 50*time.Millisecond,
		"three more rounds of checks reach the listener")
	http = waitService(t, s, "http", primazav1alpha1.ServiceAvailable, time.Second)
	assert.Equal(t, before, http.ResourceVersion, "checks that agree leave the service untouched")

	l.close()
	for _, name := range []string{"tcp", "http"} {
		svc := waitService(t, s, name, primazav1alpha1.ServiceUnreachable, flipWithin)
		assert.Contains(t, svc.Status.HealthCheck.Message, "connection refused")
		assert.Equal(t, int32(1), svc.Status.HealthCheck.ConsecutiveFailures)
	}
	l.open()
	for _, name := range []string{"tcp", "http"} {
		waitService(t, s, name, primazav1alpha1.ServiceAvailable, flipWithin)
	}

	// The recorder writes Events after the status, on a goroutine of its
	// own: the last one may come a moment after the state it reports.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var events corev1.EventList
		require.NoError(c, s.Kube.Client.List(context.Background(), &events, ctrlclient.InNamespace(s.Namespace)))
		var transitions []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "tcp" && e.InvolvedObject.Kind == "RegisteredService" {
				transitions = append(transitions, e.Type+" "+e.Reason+": "+e.Message[:strings.Index(e.Message, ":")])
			}
		}
		assert.ElementsMatch(c, []string{"Normal Available: (new) → Available", "Warning Unreachable: Available → Unreachable",
			"Normal Available: Unreachable → Available"}, transitions, "every transition is an Event")
	}, 10*time.Second, 100*time.Millisecond, "every transition is an Event, once")
	// The loop's current details in the UI list the latest changes.
	id := runs.HealthChecksID(healthcheck.Shard(s.Namespace, "tcp"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := s.Temporal.QueryWorkflow(context.Background(), id, "", "__temporal_workflow_metadata")
		require.NoError(c, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(c, v.Get(&md))
		assert.Contains(c, md.GetCurrentDetails(), "last pass at ")
		assert.Contains(c, md.GetCurrentDetails(), s.Namespace+"/tcp: Available → Unreachable: tcp "+l.addr+": connect: connection refused")
		assert.Contains(c, md.GetCurrentDetails(), s.Namespace+"/tcp: Unreachable → Available: tcp "+l.addr+" accepts connections")
	}, 10*time.Second, 100*time.Millisecond, "the loop shows the changes of state")
	recorded(t, s.History(id, ""), "healthchecks")
}

// TestHealthCheckThresholdsAndSpecChange: with failureThreshold 2 one
// failed check leaves the service Available; a change of the interval
// from 5 minutes to 1 holds at once, without waiting out the old one.
func TestHealthCheckThresholdsAndSpecChange(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	l := listen(t)
	registered(t, s, "slow", fmt.Sprintf("    tcp: {host: 127.0.0.1, port: %s, minutes: 5, timeoutSeconds: 1}\n    failureThreshold: 2", l.port()))
	svc := waitService(t, s, "slow", primazav1alpha1.ServiceAvailable, flipWithin)

	l.close()
	// Every 10 s now; one interval later one failure has been counted and
	// the service is still Available.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(svc), svc))
		require.NotNil(c, svc.Status.HealthCheck)
		assert.Equal(c, int32(1), svc.Status.HealthCheck.ConsecutiveFailures)
	}, 5*checkMinute+10*time.Second, 50*time.Millisecond, "one failure is counted")
	assert.Equal(t, primazav1alpha1.ServiceAvailable, svc.Status.State, "one failure is under the threshold")

	// Down to one minute: the changed spec is checked at once, and from
	// then on every two seconds: the second failure comes well before the
	// old interval would have run out.
	base := svc.DeepCopy()
	svc.Spec.HealthCheck.TCP.Minutes = 1
	require.NoError(t, s.Kube.Client.Patch(context.Background(), svc, ctrlclient.MergeFrom(base)))
	changed := time.Now()
	waitService(t, s, "slow", primazav1alpha1.ServiceUnreachable, flipWithin)
	assert.Less(t, time.Since(changed), 5*checkMinute, "the new interval holds before the old one ran out")
}

// TestHealthChecksInContainers: a check whose Job completes makes its
// service Available, one whose pod fails Unreachable, one whose image
// cannot be pulled or that runs out of time Unknown, saying why; deleting
// the services leaves no Job behind.
func TestHealthChecksInContainers(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	registered(t, s, "passes", `    container: {image: "alpine:3.20", command: [/bin/sh, -c, exit 0], minutes: 1}`)
	registered(t, s, "fails", `    container: {image: "`+controlplane.FailingImage+`", minutes: 1}`)
	registered(t, s, "unpullable", `    container: {image: "`+controlplane.UnpullableImage+`", minutes: 1}`)
	registered(t, s, "hangs", `    container: {image: "`+controlplane.HangingImage+`", minutes: 1, timeoutSeconds: 2}`)

	passes := waitService(t, s, "passes", primazav1alpha1.ServiceAvailable, time.Minute)
	assert.Contains(t, passes.Finalizers, "healthcheck.quartermaster.io/jobs", "a container check holds the deletion until its Jobs are gone")
	assert.Equal(t, "the check's container exited 0", passes.Status.HealthCheck.Message)
	fails := waitService(t, s, "fails", primazav1alpha1.ServiceUnreachable, time.Minute)
	assert.Equal(t, "the check's container exited 1: the simulated check failed", fails.Status.HealthCheck.Message)
	unpullable := waitChecked(t, s, "unpullable", primazav1alpha1.ServiceUnknown, time.Minute)
	require.NotNil(t, unpullable.Status.HealthCheck, "Unknown after a check, not before the first")
	assert.Contains(t, unpullable.Status.HealthCheck.Message, "the check could not start: ErrImagePull")

	hangs := waitChecked(t, s, "hangs", primazav1alpha1.ServiceUnknown, time.Minute)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(hangs), hangs))
		require.NotNil(c, hangs.Status.HealthCheck)
		assert.Equal(c, "the check ran out of its 2 s", hangs.Status.HealthCheck.Message)
	}, time.Minute, 100*time.Millisecond, "a check out of time tells nothing")

	// Deleting the services ends their checks: their Jobs go, then the
	// finalizer.
	for _, svc := range []*primazav1alpha1.RegisteredService{passes, fails, unpullable, hangs} {
		require.NoError(t, s.Kube.Client.Delete(context.Background(), svc))
	}
	for _, svc := range []*primazav1alpha1.RegisteredService{passes, fails, unpullable, hangs} {
		s.WaitGone(svc)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var jobs batchv1.JobList
		require.NoError(c, s.Kube.Client.List(context.Background(), &jobs, ctrlclient.InNamespace(s.Namespace)))
		assert.Empty(c, jobs.Items, "no check's Job is left behind")
	}, 30*time.Second, 100*time.Millisecond)
}

// TestHealthCheckWorkerRestart: the worker stops while a container check
// runs; the restarted one reads that check, leaves no Job behind, runs the
// next check on time, and no loop runs twice.
func TestHealthCheckWorkerRestart(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	registered(t, s, "restart", `    container: {image: "alpine:3.20", minutes: 3}`)
	svc := waitService(t, s, "restart", primazav1alpha1.ServiceUnknown, 30*time.Second)
	uid := string(svc.UID)
	jobs := func(c require.TestingT) []batchv1.Job {
		var list batchv1.JobList
		require.NoError(c, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace),
			ctrlclient.MatchingLabels{healthcheck.LabelService: uid}))
		return list.Items
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, jobs(c), 1) }, 30*time.Second, 20*time.Millisecond, "the first check runs")
	first := jobs(t)[0].Name
	s.StopWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j := jobs(c)
		require.Len(c, j, 1)
		assert.EqualValues(c, 1, j[0].Status.Succeeded)
	}, 30*time.Second, 50*time.Millisecond, "the check ends while no worker runs")

	s.StartWorker()
	restarted := time.Now()
	waitService(t, s, "restart", primazav1alpha1.ServiceAvailable, flipWithin)
	next := ""
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, j := range jobs(c) {
			if j.Name != first && j.DeletionTimestamp.IsZero() {
				next = j.Name
			}
		}
		assert.NotEmpty(c, next, "a Job other than %s", first)
	}, 3*checkMinute+10*time.Second, 20*time.Millisecond, "the next check runs on time")
	assert.Less(t, time.Since(restarted), 3*checkMinute+10*time.Second)
	for _, j := range jobs(t) {
		assert.NotEqual(t, first, j.Name, "the check read after the restart is deleted")
	}

	id := runs.HealthChecksID(healthcheck.Shard(s.Namespace, "restart"))
	resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q AND ExecutionStatus = 'Running'", id),
	})
	require.NoError(t, err)
	assert.Len(t, resp.Executions, 1, "one loop runs for the shard")
	_, err = strconv.Atoi(next[len(next)-10:])
	assert.NoError(t, err, "a check's Job is named by its instant: %s", next)
}

// TestSeedExamples: Primaza's example (crds/testdata/seeds), with its
// "health check" spelling, and a service without a check both reach
// Available.
func TestSeedExamples(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	raw, err := os.ReadFile(filepath.Join("..", "crds", "testdata", "seeds", "000-registeredservice.yaml"))
	require.NoError(t, err)
	seed := testenv.Decode(t, string(raw))
	seed.SetNamespace(s.Namespace)
	require.NoError(t, s.Kube.Client.Create(context.Background(), seed))
	registered(t, s, "unchecked", "")
	svc := waitService(t, s, "service-1", primazav1alpha1.ServiceAvailable, time.Minute)
	assert.Equal(t, primazav1alpha1.CheckSucceeded, svc.Status.HealthCheck.LastResult)
	unchecked := waitService(t, s, "unchecked", primazav1alpha1.ServiceAvailable, 30*time.Second)
	assert.Nil(t, unchecked.Status.HealthCheck)
	assert.NotContains(t, unchecked.Finalizers, "healthcheck.quartermaster.io/jobs", "a service without a check runs no Job to wait for")
}

// TestHealthChecksLoopContinuesAsNew: a loop continues as new when
// Temporal suggests it, on the real server; the loop here has a shard with
// no services, and the server suggests it at 20 events.
func TestHealthChecksLoopContinuesAsNew(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, HealthCheckMinute: 200 * time.Millisecond, SuggestContinueAsNewAt: 20})
	id := "registeredservices/" + s.Namespace
	run, err := s.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: runs.TaskQueue},
		runs.HealthChecksType, map[string]any{"shard": healthcheck.Shards + 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Temporal.TerminateWorkflow(context.Background(), id, "", "the test is over") })
	var next *workflow.ContinueAsNewError
	require.ErrorAs(t, run.GetWithOptions(context.Background(), nil, client.WorkflowRunGetOptions{DisableFollowingRuns: true}), &next)
	h := s.History(id, run.GetRunID())
	assert.Equal(t, enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, h.Events[len(h.Events)-1].GetEventType())
	recorded(t, h, "healthchecks-continue-as-new")
}
