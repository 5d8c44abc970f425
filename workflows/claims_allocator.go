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

// wakesFromGive is the change that has a pass wake its claims from its
// activity (Give); runs from before it wake them with a signal each from
// the workflow (allocateThenWake).
const wakesFromGive = "allocator-wakes-from-give"

// passHeartbeat is how soon a pass whose worker died in the middle of it
// is retried elsewhere: Give heartbeats as it hands out services (Allocate,
// from before wakesFromGive, does not, and is bounded by it as a whole).
const passHeartbeat = 30 * time.Second

// passTimeout bounds one pass as a whole: a burst of ten thousand claims
// may take one pass longer than a heartbeat, and a pass cut short would
// start again from the beginning.
const passTimeout = 10 * time.Minute

// ClaimAllocator hands a namespace's services to its claims, so that
// claims made together do not race for the same services:
//
//  1. wait until a claim asks for a service (runs.SignalClaimWants; the
//     watcher asks for new claims in lists, runs.SignalClaimsWant), and
//     take every request that came meanwhile;
//  2. hand them services in one pass, and wake each claim asked for,
//     naming what it got (runs.SignalClaimChanged): Give, an activity, as
//     it may take longer than a workflow task and is retried where it left
//     off; the claim settles again and resolves, or is Pending saying why.
//
// One allocator runs per namespace (its workflow ID), one pass at a time:
// exclusivity holds by construction, and a pass retried after a worker's
// death finds what it had already taken, held by the same claims.
func ClaimAllocator(ctx workflow.Context, namespace string, waiting []string) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: passTimeout,
		HeartbeatTimeout:    passHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second},
	})
	var a *activities.Claims
	wants := workflow.GetSignalChannel(ctx, runs.SignalClaimWants)
	gathered := workflow.GetSignalChannel(ctx, runs.SignalClaimsWant)
	for range allocatorPassesPerRun {
		if len(waiting) == 0 {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(wants, func(c workflow.ReceiveChannel, _ bool) {
				var name string
				c.Receive(ctx, &name)
				waiting = append(waiting, name)
			})
			sel.AddReceive(gathered, func(c workflow.ReceiveChannel, _ bool) {
				var names []string
				c.Receive(ctx, &names)
				waiting = append(waiting, names...)
			})
			sel.Select(ctx)
		}
		waiting = slices.Compact(slices.Sorted(slices.Values(drainAll(gathered, drain(wants, waiting)))))
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("handing services to %d claims", len(waiting)))
		if workflow.GetVersion(ctx, wakesFromGive, workflow.DefaultVersion, 1) == 1 {
			if err := workflow.ExecuteActivity(ctx, a.Give, namespace, waiting).Get(ctx, nil); err != nil {
				return err
			}
		} else if err := allocateThenWake(ctx, namespace, waiting); err != nil {
			return err
		}
		waiting = nil
		workflow.SetCurrentDetails(ctx, "waiting for a claim to ask for a service")
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			break
		}
	}
	return workflow.NewContinueAsNewError(ctx, runs.AllocatorType, namespace, drainAll(gathered, drain(wants, nil)))
}

// drainAll appends to into every name of the lists received so far.
func drainAll(c workflow.ReceiveChannel, into []string) []string {
	for {
		var names []string
		if !c.ReceiveAsync(&names) {
			return into
		}
		into = append(into, names...)
	}
}

// allocateThenWake is a pass as it was before wakesFromGive: the services
// handed out by Allocate, then each claim woken from the workflow.
func allocateThenWake(ctx workflow.Context, namespace string, waiting []string) error {
	var a *activities.Claims
	var given []activities.Allocation
	if err := workflow.ExecuteActivity(ctx, a.Allocate, namespace, waiting).Get(ctx, &given); err != nil {
		return err
	}
	wake := make([]workflow.Future, 0, len(given))
	for _, g := range given {
		wake = append(wake, workflow.SignalExternalWorkflow(ctx, runs.ClaimID(namespace, g.Claim), "", runs.SignalClaimChanged, g.Service))
	}
	for _, f := range wake {
		// A claim deleted meanwhile has no workflow to wake.
		_ = f.Get(ctx, nil)
	}
	return nil
}
