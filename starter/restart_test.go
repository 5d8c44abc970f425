package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestWorkerRestartMidProvision stops the worker after the objects are
// applied and before the status says succeeded, and starts another: the
// workflow finishes, with no duplicate objects and no second password.
func TestWorkerRestartMidProvision(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	plan := s.Plan("gated", "", testenv.Templates("gated-password"))
	s.Instance("restart-1", plan, "")
	inst := s.WaitInstance("restart-1", "applied, waiting for the gate", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress && len(i.Status.Resources) == 1
	})
	assert.Equal(t, "waiting for the gate", inst.Status.Description, "what the status template says while it waits")
	password := s.RegistryValue("qm-instance-restart-1", "password")

	s.StopWorker()
	gate := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "restart-1-gate", Namespace: s.Namespace}}
	require.NoError(t, s.Kube.Client.Create(ctx, gate))
	// The run's next poll comes due with no worker: its timer fires and a
	// workflow task waits, which no worker takes (the last timer fired has
	// no task started after it). It may come due before the gate opens,
	// as the worker stops: the task waits all the same, and the worker that
	// takes it finds the gate open. The poll's backoff grows to 30 s, so how
	// long to wait is read from the pending timer in the run's history,
	// with room for a loaded machine.
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := s.ReadHistory(id, "")
		require.NoError(c, err)
		events := h.Events
		fired := -1
		for i, ev := range events {
			if ev.GetEventType() == enums.EVENT_TYPE_TIMER_FIRED {
				fired = i
			}
		}
		require.GreaterOrEqual(c, fired, 0, "a poll came due")
		for _, ev := range events[fired:] {
			assert.NotEqual(c, enums.EVENT_TYPE_WORKFLOW_TASK_STARTED, ev.GetEventType(), "no worker took the task")
		}
		assert.Equal(c, enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, events[len(events)-1].GetEventType())
	}, time.Until(nextPoll(t, s, id))+30*time.Second, 200*time.Millisecond)
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), inst))
	assert.Equal(t, osbv1alpha1.StateInProgress, inst.Status.State, "nothing moves without a worker")

	s.StartWorker()
	inst = s.WaitInstance("restart-1", "provisioned by the new worker", testenv.Succeeded(1))
	assert.Equal(t, "open", inst.Status.Description)

	var cms corev1.ConfigMapList
	require.NoError(t, s.Kube.Client.List(ctx, &cms, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingLabels{"app": "gated"}))
	require.Len(t, cms.Items, 1, "no duplicate objects")
	assert.Equal(t, password, cms.Items[0].Data["password"], "no second password")
	assert.Equal(t, password, s.RegistryValue("qm-instance-restart-1", "password"))
	assert.Equal(t, 1, s.Runs(t, id), "one run carried over the restart")

	recorded(t, s.History(id, ""), "provision-restart")
}

// nextPoll reads when the run's latest poll timer comes due.
func nextPoll(t *testing.T, s *testenv.System, id string) time.Time {
	t.Helper()
	h, err := s.ReadHistory(id, "")
	require.NoError(t, err)
	var due time.Time
	for _, ev := range h.Events {
		if attrs := ev.GetTimerStartedEventAttributes(); attrs != nil {
			due = ev.GetEventTime().AsTime().Add(attrs.GetStartToFireTimeout().AsDuration())
		}
	}
	require.False(t, due.IsZero(), "the provision polls the gate on a timer")
	return due
}

// TestConcurrentOperationIsRefused: the workflow ID is the lock. A second
// operation on an instance while one runs is refused by Temporal; the
// starter starts it once the running one is done.
func TestConcurrentOperationIsRefused(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	plan := s.Plan("gated", "", testenv.Templates("gated-password"))
	s.Instance("busy", plan, "")
	s.WaitInstance("busy", "in progress", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress
	})
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "busy"})
	target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "busy"}

	_, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: runs.TaskQueue,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, runs.WorkflowType(lifecycle.OpUpdate), target)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	require.ErrorAs(t, err, &started, "an Update while the Provision runs is refused")

	// A spec change meanwhile asks for an update. A starter of its own,
	// which has started nothing, reconciles it and starts nothing while the
	// provision runs: the latest run under the ID, read from Temporal's
	// store, is still the provision.
	provision, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	var inst osbv1alpha1.SFServiceInstance
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "busy"}, &inst))
	base := inst.DeepCopy()
	inst.Spec.OrganizationGUID = "org-2"
	require.NoError(t, s.Kube.Client.Patch(ctx, &inst, ctrlclient.MergeFrom(base)))
	_, err = (&starter.Starter{Client: s.Kube.Client, Temporal: s.Temporal}).ReconcileInstance(ctx, ctrl.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(&inst)})
	require.NoError(t, err)
	latest, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	assert.Equal(t, provision.WorkflowExecutionInfo.Execution.RunId, latest.WorkflowExecutionInfo.Execution.RunId, "still one run while the provision waits")
	assert.Equal(t, "Provision", latest.WorkflowExecutionInfo.Type.Name)

	// Once the provision finishes, the update the spec change asked for runs.
	require.NoError(t, s.Kube.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "busy-gate", Namespace: s.Namespace}}))
	s.WaitInstance("busy", "updated to generation 2", testenv.Succeeded(2))
	s.ClosedRun(id, runs.WorkflowType(lifecycle.OpUpdate))
	assert.Equal(t, 2, s.Runs(t, id), "provision, then update")
}
