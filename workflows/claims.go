package workflows

import (
	"cmp"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/workflows/runs"
)

// resolutionsPerRun bounds a claim's history: it continues as new after
// this many resolutions.
const resolutionsPerRun = 200

// pendingRecheck is how long a Pending claim waits for a signal before it
// looks again on its own: a safety net for a change whose signal was
// missed (a watcher that restarted in between, say).
const pendingRecheck = 5 * time.Minute

// pendingRechecked is the change that gave Pending claims pendingRecheck;
// runs from before it wait for a signal alone.
const pendingRechecked = "pending-recheck"

// allocated is the change that has claims ask their namespace's allocator
// for a service (ClaimAllocator) instead of taking one themselves; runs
// from before it go on taking (Resolve).
const allocated = "claim-allocator"

// startSignalsRead is the change that has a claim's first look answer the
// signal its start came with (the watcher's SignalWithStart); runs from
// before it read that signal after their first look and looked again,
// asking the allocator twice.
const startSignalsRead = "start-signals-read"

// settledInOneStep is the change that has a claim settle in one step that
// reads the claim once (Settle); runs from before it go on in the steps of
// serviceClaimInSteps, which read the claim up to three times a
// resolution and record a marker each.
const settledInOneStep = "settled-in-one-step"

// ServiceClaim carries one ServiceClaim through its life, for as long as
// the claim exists:
//
//  1. settle it (Settle, one step): keep the service it holds while that
//     still matches and write its binding Secret and status from it; or
//     ask the namespace's allocator for one; or record it Pending, saying
//     why;
//  2. wait until the claim, its service or a service it could take
//     changes (the watcher signals), or the allocator answers, naming what
//     it gave; while Pending or asking, pendingRecheck at most; and go
//     back to 1;
//  3. once the claim is deleted, step 1 lets go of its services, its
//     Secret and its finalizer, and the workflow ends.
func ServiceClaim(ctx workflow.Context, t runs.ClaimTarget) error {
	if workflow.GetVersion(ctx, settledInOneStep, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return serviceClaimInSteps(ctx, t)
	}
	ctx = retriedUntilDone(ctx)
	var a *activities.Claims
	changed := workflow.GetSignalChannel(ctx, runs.SignalClaimChanged)
	step := activities.Settling{Claim: t, Given: latest(changed)}
	for range resolutionsPerRun {
		var res activities.Resolution
		if err := workflow.ExecuteLocalActivity(ctx, a.Settle, step).Get(ctx, &res); err != nil {
			return err
		}
		step.UID = cmp.Or(res.ClaimUID, step.UID)
		if res.Gone {
			// A service given while the claim went is let go of too.
			if step.Given = latest(changed); step.Given != "" {
				continue
			}
			return nil
		}
		workflow.SetCurrentDetails(ctx, claimDetails(t, res))
		recheck := pendingRecheck
		if res.State == primazav1alpha1.ClaimResolved {
			recheck = 0
		}
		step.Given = waitForChange(ctx, changed, recheck)
	}
	return workflow.NewContinueAsNewError(ctx, ServiceClaim, t)
}

// latest is the last service named by the signals received so far ("" if
// none named one).
func latest(changed workflow.ReceiveChannel) string {
	given := ""
	for _, v := range drain(changed, nil) {
		given = cmp.Or(v, given)
	}
	return given
}

// claimDetails is what the UI shows of a claim's workflow while it waits.
func claimDetails(t runs.ClaimTarget, res activities.Resolution) string {
	if res.Wants {
		return "asked the allocator of " + t.Namespace + " for a service"
	}
	if res.State == primazav1alpha1.ClaimResolved {
		return fmt.Sprintf("holds service %s (%s); waiting for a change", res.Service, res.ServiceState)
	}
	return "Pending: " + res.Reason + "; waiting for a service to become Available (looking again every " + pendingRecheck.String() + ")"
}
