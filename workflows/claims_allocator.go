package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

// allocatorPassesPerRun bounds an allocator's history: it continues as new after
// this many passes, or sooner when Temporal suggests it.
const allocatorPassesPerRun = 500

// allocateTimeout bounds one pass of Allocate: a worker that dies in the
// middle of one has it retried elsewhere this soon.
const allocateTimeout = 30 * time.Second

// ClaimAllocator hands a namespace's services to its claims, so that
// claims made together do not race for the same services:
//
//  1. wait until a claim asks for a service (runs.SignalClaimWants), and
//     take every request that came meanwhile;
//  2. hand them services in one pass (Allocate, an activity: it may take
//     longer than a workflow task and is retried where it left off);
//  3. wake each claim asked for, naming what it got (runs.SignalClaimChanged);
//     it looks again and resolves, or stays Pending saying why.
//
// One allocator runs per namespace (its workflow ID), one pass at a time:
// exclusivity holds by construction, and a pass retried after a worker's
// death finds what it had already taken, held by the same claims.
func ClaimAllocator(ctx workflow.Context, namespace string, waiting []string) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: allocateTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second},
	})
	var a *activities.Claims
	wants := workflow.GetSignalChannel(ctx, runs.SignalClaimWants)
	for range allocatorPassesPerRun {
		if len(waiting) == 0 {
			var name string
			wants.Receive(ctx, &name)
			waiting = append(waiting, name)
		}
		waiting = slices.Compact(slices.Sorted(slices.Values(drain(wants, waiting))))
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("handing services to %d claims", len(waiting)))
		var given []activities.Allocation
		if err := workflow.ExecuteActivity(ctx, a.Allocate, namespace, waiting).Get(ctx, &given); err != nil {
			return err
		}
		waiting = nil
		wake := make([]workflow.Future, 0, len(given))
		for _, g := range given {
			wake = append(wake, workflow.SignalExternalWorkflow(ctx, runs.ClaimID(namespace, g.Claim), "", runs.SignalClaimChanged, g.Service))
		}
		for _, f := range wake {
			// A claim deleted meanwhile has no workflow to wake.
			_ = f.Get(ctx, nil)
		}
		workflow.SetCurrentDetails(ctx, "waiting for a claim to ask for a service")
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			break
		}
	}
	return workflow.NewContinueAsNewError(ctx, runs.AllocatorType, namespace, drain(wants, nil))
}
