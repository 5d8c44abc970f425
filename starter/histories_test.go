package starter_test

import (
	"context"
	"flag"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

var record = flag.Bool("record", false, "record the histories of every workflow path into workflows/testdata for the replay test (make record-histories)")

// recorded keeps a run's history for the replay test when -record is set.
func recorded(t *testing.T, h *historypb.History, name string) {
	t.Helper()
	if *record {
		testenv.WriteHistory(t, h, filepath.Join("..", "workflows", "testdata", name+".json"))
	}
}

// TestHistories drives every path of the lifecycle workflows on the real
// servers, checking what a user sees at each step; with -record it keeps
// each run's history for workflows' replay test. Every path: provision,
// an early exit (the operation already done), update, bind, unbind,
// deprovision, a template failure and a polling timeout. (A provision that
// waits for its status, across a worker restart, is
// TestWorkerRestartMidProvision's.)
func TestHistories(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "h-1"}
	id := runs.WorkflowID(target)
	history := func(workflowID string, op lifecycle.Operation) *historypb.History {
		t.Helper()
		return s.History(workflowID, s.ClosedRun(workflowID, runs.WorkflowType(op)))
	}

	// Histories hold names and states: never parameters.
	const secretParameter = "parameter-value-kept-out-of-histories"
	s.Instance("h-1", plan, `{"size": "small", "note": "`+secretParameter+`"}`)
	inst := s.WaitInstance("h-1", "provisioned", testenv.Succeeded(1))
	provision := history(id, lifecycle.OpProvision)
	assert.Contains(t, testenv.HistoryText(provision), `"name":"h-1"`, "the history's payloads are read decoded")
	assert.NotContains(t, testenv.HistoryText(provision), secretParameter)
	recorded(t, provision, "provision")

	// The same Provision again finds it done and ends after its first step.
	run, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: runs.TaskQueue},
		runs.WorkflowType(lifecycle.OpProvision), target)
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))
	early := s.History(id, run.GetRunID())
	var steps []string
	for _, ev := range early.Events {
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil {
			steps = append(steps, string(m.GetDetails()["data"].GetPayloads()[0].GetData()))
		}
	}
	require.Len(t, steps, 1, "one step, then the run completes")
	assert.Contains(t, steps[0], `"ActivityType":"Begin"`)
	assert.Equal(t, enums.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, early.Events[len(early.Events)-1].GetEventType())
	recorded(t, early, "early-exit")
	s.WaitInstance("h-1", "untouched", testenv.Succeeded(1))

	base := inst.DeepCopy()
	inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"size": "large", "note": "` + secretParameter + `"}`)}
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	s.WaitInstance("h-1", "updated", testenv.Succeeded(2))
	update := history(id, lifecycle.OpUpdate)
	assert.NotContains(t, testenv.HistoryText(update), secretParameter)
	recorded(t, update, "update")

	b := s.Bind("hb-1", "h-1", plan)
	bindID := runs.WorkflowID(lifecycle.BindingTarget(b))
	bind := history(bindID, lifecycle.OpBind)
	recorded(t, bind, "bind")

	require.NoError(t, s.Kube.Client.Delete(ctx, b))
	s.WaitGone(b)
	recorded(t, history(bindID, lifecycle.OpUnbind), "unbind")

	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	recorded(t, history(id, lifecycle.OpDeprovision), "deprovision")

	broken := s.Plan("broken", "", testenv.Templates("broken"))
	s.Instance("h-broken", broken, "")
	failed := s.WaitInstance("h-broken", "failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
	assert.Contains(t, failed.Status.Description, `function "required" not defined`)
	recorded(t, history(runs.WorkflowID(lifecycle.InstanceTarget(failed)), lifecycle.OpProvision), "template-failure")

	// A gate that never opens: the status template says "in progress" until
	// the plan's maximum_polling_duration has passed.
	slow := s.Plan("slow", "  maximum_polling_duration: 3", testenv.Templates("gated-password"))
	s.Instance("h-slow", slow, "")
	timedOut := s.WaitInstance("h-slow", "failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
	assert.Equal(t, `provision did not finish within the plan's maximum_polling_duration of 3s (last status: in progress, "waiting for the gate")`, timedOut.Status.Description)
	timeout := history(runs.WorkflowID(lifecycle.InstanceTarget(timedOut)), lifecycle.OpProvision)
	recorded(t, timeout, "polling-timeout")
}
