package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows/runs"
)

// release is one running worker of a build, stopped as a pod is: its
// context is cancelled (SIGTERM) and it stops when it is done.
type release struct {
	stop    context.CancelFunc
	stopped chan error
}

func startRelease(t *testing.T, s *testenv.System, build string, revision int) *release {
	t.Helper()
	return startReleaseOf(t, s, worker.Versioning{Deployment: "qm-test", BuildID: build, Revision: revision})
}

// startReleaseOf is startRelease with the versioning v says.
func startReleaseOf(t *testing.T, s *testenv.System, v worker.Versioning) *release {
	t.Helper()
	build := v.BuildID
	// A client of its own, as a pod has: the watcher's client would start
	// runs eagerly on a worker of its own, whatever the routing.
	tc, err := client.NewClientFromExisting(s.Temporal, client.Options{})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := system.Start(ctx, system.Options{Kube: s.Kube.Config, Catalog: s.Catalog(), Temporal: tc, Worker: true, HealthCheckMinute: time.Second,
		WorkerVersioning: v})
	require.NoError(t, err, "starting the worker of build %s", build)
	r := &release{stop: cancel, stopped: make(chan error, 1)}
	go func() { r.stopped <- sys.Wait() }()
	t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			t.Errorf("the worker of build %s stopped: %v", build, err)
		}
	})
	return r
}

// current is the build the deployment routes to, "" for none.
func current(t require.TestingT, tc client.Client) string {
	builds, _, err := worker.Builds(context.Background(), tc, "qm-test", nil)
	require.NoError(t, err)
	for _, b := range builds {
		if b.Routing == "current" {
			return b.ID
		}
	}
	return ""
}

// versionOf is the build the latest run under id is on, and whether it is
// pinned there.
func versionOf(t require.TestingT, tc client.Client, id string) (build string, pinned bool, status enums.WorkflowExecutionStatus) {
	return runVersion(t, tc, id, "")
}

// firstVersionOf is versionOf for the first run under id: an operation's
// run that did the work, not a start repeated from a lagging cache, which
// finds the work done.
func firstVersionOf(t require.TestingT, tc client.Client, id string) (build string, pinned bool, status enums.WorkflowExecutionStatus) {
	resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetExecutions(), id)
	first := slices.MinFunc(resp.GetExecutions(), func(a, b *workflowpb.WorkflowExecutionInfo) int {
		return a.GetStartTime().AsTime().Compare(b.GetStartTime().AsTime())
	})
	return runVersion(t, tc, id, first.GetExecution().GetRunId())
}

func runVersion(t require.TestingT, tc client.Client, id, runID string) (build string, pinned bool, status enums.WorkflowExecutionStatus) {
	d, err := tc.DescribeWorkflowExecution(context.Background(), id, runID)
	require.NoError(t, err, id)
	info := d.GetWorkflowExecutionInfo()
	v := info.GetVersioningInfo()
	return v.GetDeploymentVersion().GetBuildId(), v.GetBehavior() == enums.VERSIONING_BEHAVIOR_PINNED, info.GetStatus()
}

// TestBuildsHandOver upgrades and rolls back the workers of a release as
// the chart's pods are, on a dev server of the test's own: an operation in
// flight finishes on the build that started it, whose stopping worker
// serves it first, while the never-ending runs and new operations move to
// the new build; a rollback is a newer revision; a pod of an older revision
// restarting takes nothing back.
func TestBuildsHandOver(t *testing.T) {
	temporal := testenv.NewLosableTemporal(t)
	s := testenv.Start(t, testenv.Parts{Watcher: true, Temporal: temporal.Client()})
	tc := s.Temporal
	gated := s.Plan("gated", "", testenv.Templates("gated"))
	instant := s.Plan("instant", "", testenv.Templates("instant"))

	r1 := startRelease(t, s, "r1", 1)
	assert.Equal(t, "r1", current(t, tc), "the deployment's first worker makes its build current")
	s.Instance("held", gated, "")
	held := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "held"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		build, pinned, status := versionOf(c, tc, held)
		assert.Equal(c, "r1", build)
		assert.True(c, pinned, "an operation is pinned to the build that started it")
		assert.Equal(c, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, status)
	}, 30*time.Second, 100*time.Millisecond)
	shard := runs.HealthChecksID(healthcheck.Shards - 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		build, pinned, _ := versionOf(c, tc, shard)
		assert.Equal(c, "r1", build)
		assert.False(c, pinned, "a never-ending run moves with the current build")
	}, 30*time.Second, 100*time.Millisecond)

	// The upgrade: the new revision's worker takes over as it starts, and
	// the old one, told to stop, keeps serving the run pinned to it.
	startRelease(t, s, "r2", 2)
	assert.Equal(t, "r2", current(t, tc), "a newer revision makes its build current")
	r1.stop()
	s.Instance("after", instant, "")
	after := s.WaitInstance("after", "provisioned on r2", testenv.Succeeded(1))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		build, pinned, _ := firstVersionOf(c, tc, runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: after.Name}))
		assert.Equal(c, "r2", build, "a new operation starts on the current build")
		assert.True(c, pinned)
	}, 10*time.Second, 100*time.Millisecond, "as visibility lists the runs")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		build, _, _ := versionOf(c, tc, shard)
		assert.Equal(c, "r2", build, "the never-ending run moved to the new build at its next task")
	}, 90*time.Second, 200*time.Millisecond)
	select {
	case err := <-r1.stopped:
		t.Fatalf("r1's worker stopped while a run was pinned to it: %v", err)
	default:
	}
	s.OpenGate("held", "gate")
	s.WaitInstance("held", "provisioned on r1", testenv.Succeeded(1))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		build, pinned, status := firstVersionOf(c, tc, held)
		assert.Equal(c, []any{"r1", true, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED}, []any{build, pinned, status},
			"the run pinned to r1 finished there, after r1's worker was told to stop")
	}, 10*time.Second, 100*time.Millisecond, "as visibility lists the runs")
	select {
	case err := <-r1.stopped:
		require.NoError(t, err, "r1's worker stops once its pinned runs are done")
	case <-time.After(time.Minute):
		t.Fatal("r1's worker did not stop once its pinned runs were done")
	}

	// The rollback is a newer revision of the older build; a pod of the
	// upgrade's revision restarting then takes nothing back.
	startRelease(t, s, "r1", 3)
	assert.Equal(t, "r1", current(t, tc), "the rollback's revision makes r1 current again")
	startRelease(t, s, "r2", 2)
	assert.Equal(t, "r1", current(t, tc), "a restarted pod of an older revision routes nothing")
	builds, _, err := worker.Builds(context.Background(), tc, "qm-test", nil)
	require.NoError(t, err)
	revisions := map[string]int{}
	for _, b := range builds {
		revisions[b.ID] = b.Revision
	}
	assert.Equal(t, map[string]int{"r1": 3, "r2": 2}, revisions, "each build records the revision that last made it current")
}

// TestANewInstallAdoptsTheBuildOfAGoneOne: a release is uninstalled and
// another installed at once, as docs/upgrades.md's "a new install right
// after helm uninstall" says. The deployment still routes to the removed
// release's build, whose worker polled a moment ago, so the new worker
// does not take over as it starts; once no worker of that build has
// polled for PollerGone, the new worker's next look (every AdoptPeriod)
// makes its own build current, and a new operation runs. With the
// defaults, 2 minutes and 30 s, that is the two and a half minutes the
// docs promise; here 20 s and 1 s.
func TestANewInstallAdoptsTheBuildOfAGoneOne(t *testing.T) {
	const pollerGone, adoptPeriod = 20 * time.Second, time.Second
	temporal := testenv.NewLosableTemporal(t)
	s := testenv.Start(t, testenv.Parts{Watcher: true, Temporal: temporal.Client()})
	tc := s.Temporal
	instant := s.Plan("instant", "", testenv.Templates("instant"))
	old := startRelease(t, s, "old", 1)
	require.Equal(t, "old", current(t, tc))

	old.stop()
	require.NoError(t, <-old.stopped, "the old release stops")
	gone := time.Now()
	startReleaseOf(t, s, worker.Versioning{Deployment: "qm-test", BuildID: "new", Revision: 1, PollerGone: pollerGone, AdoptPeriod: adoptPeriod})
	require.Less(t, time.Since(gone), pollerGone/2, "the new release started while the old one's last poll was recent")
	assert.Equal(t, "old", current(t, tc), "a worker that polled a moment ago is not gone: the new one does not take over as it starts")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "new", current(c, tc))
	}, pollerGone+10*adoptPeriod+10*time.Second, 200*time.Millisecond, "the new release adopts the deployment once the old build's workers are gone")
	t.Logf("the new build was current %s after the old release stopped (pollers gone after %s)", time.Since(gone).Round(time.Second), pollerGone)
	assert.GreaterOrEqual(t, time.Since(gone), pollerGone-2*time.Second, "not before the old build's last poll is PollerGone old")

	// Routed to the gone build, it would wait for a worker forever.
	s.Instance("after", instant, "")
	s.WaitInstance("after", "provisioned once the new build is current", testenv.Succeeded(1))
}
