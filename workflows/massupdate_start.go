package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// batchTimeout bounds one attempt of a batch. An update that outlasts it
// is not cut off: the next attempt waits for the same run.
const batchTimeout = time.Hour

// start counts one instance's update as in flight and starts it: in the
// next batch, or, in a run begun before batches, as a child.
func (r *massRun) start(ctx workflow.Context, b busy) {
	r.carry.Progress.InFlight++
	if r.batched {
		r.batch = append(r.batch, b)
		return
	}
	r.startChild(ctx, b)
}

// startBatches starts the updates gathered in this workflow task, in
// batches of massupdate.BatchSize. Each batch is one activity that starts
// its Update runs and waits for them all, which costs Temporal far less
// than a child per update; the price is that a batch's slots free up
// together, when its slowest update ends.
func (r *massRun) startBatches(ctx workflow.Context) {
	if len(r.batch) == 0 {
		return
	}
	var a *activities.MassUpdates
	for batch := range slices.Chunk(r.batch, massupdate.BatchSize(r.carry.Progress.Concurrency)) {
		targets := make(massupdate.Targets, len(batch))
		for i, b := range batch {
			targets[i] = b.target
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: batchTimeout,
			HeartbeatTimeout:    5 * activities.MassHeartbeatEvery,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 10},
			Summary:             batchSummary(targets),
		})
		f := workflow.ExecuteActivity(actx, a.UpdateInstances, massupdate.Batch{MassUpdate: r.in.Name, Targets: targets})
		if r.batches++; r.batches >= massStartsPerRun {
			r.draining = true
		}
		r.sel.AddFuture(f, func(f workflow.Future) {
			var outcomes []massupdate.Outcome
			err := f.Get(ctx, &outcomes)
			for i, b := range batch {
				r.carry.Progress.InFlight--
				o := massupdate.Outcome{Failure: "the batch of updates lost this update's outcome"}
				switch {
				case err != nil:
					o.Failure = activities.FailureText(err)
				case i < len(outcomes):
					o = outcomes[i]
				}
				r.ended(ctx, b, o)
			}
		})
	}
	r.batch = nil
}

// startChild starts one instance's Update run as a child that outlives the
// mass update (a cancelled run lets the updates in flight finish). Runs
// begun before batches start their updates so.
func (r *massRun) startChild(ctx workflow.Context, b busy) {
	t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: b.target.Namespace, Name: b.target.Name}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            runs.WorkflowID(t),
		TaskQueue:             runs.TaskQueue,
		WorkflowTaskTimeout:   runs.WorkflowTaskTimeout,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
		StaticSummary:         fmt.Sprintf("update %s/%s (mass update %s)", t.Namespace, t.Name, r.in.Name),
		TypedSearchAttributes: temporal.NewSearchAttributes(
			runs.AttrKind.ValueSet(string(t.Kind)), runs.AttrNamespace.ValueSet(t.Namespace), runs.AttrName.ValueSet(t.Name),
			runs.AttrOperation.ValueSet(string(lifecycle.OpUpdate)), runs.AttrPlan.ValueSet(b.target.PlanID)),
	})
	f := workflow.ExecuteChildWorkflow(cctx, runs.WorkflowType(lifecycle.OpUpdate), t)
	r.sel.AddFuture(f, func(f workflow.Future) {
		r.carry.Progress.InFlight--
		var res Result
		err := f.Get(ctx, &res)
		var already *temporal.ChildWorkflowExecutionAlreadyStartedError
		switch {
		case errors.As(err, &already):
			r.ended(ctx, b, massupdate.Outcome{Busy: true})
		case err != nil:
			r.ended(ctx, b, massupdate.Outcome{Failure: activities.FailureText(err)})
		default:
			r.ended(ctx, b, massupdate.Outcome{State: string(res.State)})
		}
	})
}

// batchSummary is what the UI shows of a batch.
func batchSummary(targets massupdate.Targets) string {
	if len(targets) == 1 {
		return "update " + targets[0].String()
	}
	return fmt.Sprintf("update %s and %d more", targets[0], len(targets)-1)
}
