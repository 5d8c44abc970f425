package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows/runs"
)

// updatedCount counts the instances rendered from generation 2.
func updatedCount(c require.TestingT, s *testenv.System) int {
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(c, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	return atGeneration(list.Items, 2)
}

// atGeneration counts the instances rendered from a generation of their plan.
func atGeneration(instances []osbv1alpha1.SFServiceInstance, gen int64) int {
	n := 0
	for _, inst := range instances {
		if inst.Status.AppliedPlanGeneration == gen {
			n++
		}
	}
	return n
}

// TestMassUpdateCancel: a cancelled run leaves the instances it had not
// started untouched.
func TestMassUpdateCancel(t *testing.T) {
	const n = 60
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, n, "", func(int) string { return "" })
	newVersion(t, s, "2")
	name := s.Namespace + "/cancelled"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 1}`, name, planID), http.StatusAccepted, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.GreaterOrEqual(c, updatedCount(c, s), 5) }, time.Minute, 20*time.Millisecond)
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/cancel", "", http.StatusAccepted, nil)
	var p massupdate.Progress
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p = runProgress(c, s, name)
		assert.Equal(c, massupdate.Cancelled, p.State)
		assert.Zero(c, p.InFlight)
	}, 30*time.Second, 50*time.Millisecond, "the run ends cancelled")
	updated := updatedCount(t, s)
	assert.Never(t, func() bool {
		var list osbv1alpha1.SFServiceInstanceList
		return s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)) == nil &&
			atGeneration(list.Items, 2) != updated
	}, 2*time.Second, 50*time.Millisecond, "nothing is updated after the cancel")
	assert.Less(t, updated, n, "the rest stay as they were")
	assert.Equal(t, updated, p.Succeeded)
	assert.Equal(t, "cancelled by the operator", p.Reason)
}

// TestMassUpdateFailureBudget: a plan change that fails on some instances
// pauses the run at maxFailures, listing them.
func TestMassUpdateFailureBudget(t *testing.T) {
	const n = 40
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, n, "", func(i int) string {
		if i%4 == 3 {
			return `{"fragile": true}`
		}
		return ""
	})
	newVersion(t, s, "2")
	name := s.Namespace + "/budget"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 2, "maxFailures": "3"}`, name, planID), http.StatusAccepted, nil)
	var p massupdate.Progress
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p = runProgress(c, s, name)
		assert.Equal(c, massupdate.Paused, p.State)
		assert.Zero(c, p.InFlight)
	}, time.Minute, 50*time.Millisecond, "the run pauses at its failure budget")
	assert.GreaterOrEqual(t, p.Failed, 3)
	assert.LessOrEqual(t, p.Failed, 4, "at most the one in flight beside fails after the third")
	assert.Contains(t, p.Reason, "updates failed (maxFailures 3); resume to go on, or cancel")
	require.Len(t, p.Failures, p.Failed)
	for _, f := range p.Failures {
		assert.Contains(t, f.Description, "version 2 cannot run a fragile instance")
	}
	assert.Less(t, p.Done(), n)

	// Resumed, it accepts those and pauses again at three more.
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/resume", "", http.StatusAccepted, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		q := runProgress(c, s, name)
		assert.Equal(c, massupdate.Paused, q.State)
		assert.GreaterOrEqual(c, q.Failed, p.Failed+3)
	}, time.Minute, 50*time.Millisecond, "the run pauses again")
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+name+"/cancel", "", http.StatusAccepted, nil)
	id := runs.MassUpdateID(name)
	recorded(t, s.History(id, s.ClosedRun(id, runs.MassUpdateType)), "mass-update-steered")
}

// TestMassUpdateSurvivesAWorkerRestart: the worker stops in the middle of
// a run and another starts; every instance is updated, each by exactly one
// Update run.
func TestMassUpdateSurvivesAWorkerRestart(t *testing.T) {
	const n = 100
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, n, "", func(int) string { return "" })
	newVersion(t, s, "2")
	name := s.Namespace + "/restart"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 4}`, name, planID), http.StatusAccepted, nil)
	// Its progress is part of the message: where a run stood when it did
	// not get this far (once, under the race detector, on a loaded machine).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, updatedCount(c, s), 20, "the run's progress: %+v", runProgress(c, s, name))
	}, time.Minute, 100*time.Millisecond)
	s.StopWorker()
	stopped := updatedCount(t, s)
	s.StartWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := runProgress(c, s, name)
		assert.Equal(c, massupdate.Completed, p.State)
		assert.Equal(c, n, p.Succeeded+p.Skipped)
		assert.Zero(c, p.Failed)
	}, 2*time.Minute, 100*time.Millisecond, "the run completes")
	assert.Equal(t, n, updatedCount(t, s))
	assert.Less(t, stopped, n, "the worker stopped in the middle")

	// One Update run per instance: none was updated twice.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		perInstance := map[string]int{}
		var token []byte
		for {
			resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowType = 'Update' AND QmNamespace = %q", s.Namespace), NextPageToken: token,
			})
			require.NoError(c, err)
			for _, e := range resp.GetExecutions() {
				perInstance[e.GetExecution().GetWorkflowId()]++
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		assert.Len(c, perInstance, n)
		for id, runs := range perInstance {
			assert.Equal(c, 1, runs, id)
		}
	}, 20*time.Second, 200*time.Millisecond, "exactly one Update run per instance")
}

// TestMassUpdateWaitsForABusyInstance: an instance whose own update is
// under way when the run reaches it is tried again once that update ends;
// it is not failed.
func TestMassUpdateWaitsForABusyInstance(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, 3, "", func(int) string { return "" })
	newVersion(t, s, "2")
	busy, err := s.GetInstance("m-001")
	require.NoError(t, err)
	base := busy.DeepCopy()
	busy.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"gated": true}`)}
	require.NoError(t, s.Kube.Client.Patch(context.Background(), busy, ctrlclient.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"m-001"}, runningUpdates(c, s))
	}, 30*time.Second, 50*time.Millisecond, "m-001's own update waits for its gate")

	name := s.Namespace + "/busy"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 1}`, name, planID), http.StatusAccepted, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := runProgress(c, s, name)
		assert.Equal(c, 2, p.Succeeded)
		assert.Equal(c, 1, p.Remaining, "m-001 waits")
		assert.Equal(c, massupdate.Running, p.State)
	}, 30*time.Second, 50*time.Millisecond, "the others are updated; the busy one waits")
	openGates(t, s)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := runProgress(c, s, name)
		assert.Equal(c, massupdate.Completed, p.State)
		assert.Zero(c, p.Failed)
		assert.Equal(c, 3, p.Succeeded+p.Skipped)
	}, time.Minute, 100*time.Millisecond, "the run completes once m-001's update ended")
	inst, err := s.GetInstance("m-001")
	require.NoError(t, err)
	assert.EqualValues(t, 2, inst.Status.AppliedPlanGeneration)
}

// TestMassUpdateLetsItsWorkerStop: a worker stopping while a batch waits
// for updates that wait for their gates stops at once, not after its stop
// timeout; the batch's next attempt, on the new worker, waits for the same
// Update runs, which count as updated (not skipped, as a second run would).
func TestMassUpdateLetsItsWorkerStop(t *testing.T) {
	const n = 4
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, API: true})
	planID := massFleet(t, s, n, "", func(int) string { return `{"gated": true}` })
	newVersion(t, s, "2")
	name := s.Namespace + "/stopping"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": %d}`, name, planID, n), http.StatusAccepted, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, runningUpdates(c, s), n)
	}, 30*time.Second, 50*time.Millisecond, "every update waits for its gate")

	began := time.Now()
	s.StopWorker()
	assert.Less(t, time.Since(began), worker.DefaultStopTimeout/2, "the batches let the worker stop")
	s.StartWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		openGates(c, s)
		p := runProgress(c, s, name)
		assert.Equal(c, massupdate.Completed, p.State)
		assert.Equal(c, n, p.Succeeded, "the Update runs begun before the stop, waited for")
	}, time.Minute, 100*time.Millisecond, "the run completes")

	id := runs.MassUpdateID(name)
	var retried []string
	for _, e := range s.History(id, s.ClosedRun(id, runs.MassUpdateType)).GetEvents() {
		if a := e.GetActivityTaskStartedEventAttributes(); a.GetAttempt() > 1 {
			retried = append(retried, a.GetLastFailure().GetMessage())
		}
	}
	const stopping = "the worker is stopping; the next attempt waits for these updates"
	assert.Equal(t, []string{stopping, stopping}, retried, "each of the two batches tried again once")
	for i := range n {
		target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: fmt.Sprintf("m-%03d", i)}
		working, _ := s.WorkingRuns(t, runs.WorkflowID(target))
		assert.Equal(t, 2, working, "m-%03d: its provision and one update", i)
	}
}
