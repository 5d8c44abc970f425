package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/workflows/runs"
)

// serviceClaimInSteps is ServiceClaim as it was before settledInOneStep,
// for the runs from before it, unchanged: it carries one ServiceClaim
// through its life, for as long as the claim exists:
//
//  1. resolve it: keep the service it holds while that still matches, or
//     ask the namespace's allocator for one and look again when it answers
//     (or stay Pending, saying why);
//  2. write its binding Secret from that service;
//  3. record the outcome on the claim;
//  4. wait until the claim, its service or a service it could take
//     changes (the watcher signals), or, while Pending, pendingRecheck at
//     most, and go back to 1;
//  5. once the claim is deleted, release its service and its Secret.
func serviceClaimInSteps(ctx workflow.Context, t runs.ClaimTarget) error {
	ctx = retriedUntilDone(ctx)
	var a *activities.Claims
	changed := workflow.GetSignalChannel(ctx, runs.SignalClaimChanged)
	hint := ""
	if workflow.GetVersion(ctx, startSignalsRead, workflow.DefaultVersion, 1) == 1 {
		for _, v := range drain(changed, nil) {
			hint = cmp.Or(v, hint)
		}
	}
	for range resolutionsPerRun {
		var res activities.Resolution
		var look workflow.Future
		if workflow.GetVersion(ctx, allocated, workflow.DefaultVersion, 1) == 1 {
			look = workflow.ExecuteLocalActivity(ctx, a.Look, t, hint)
		} else {
			look = workflow.ExecuteLocalActivity(ctx, a.Resolve, t)
		}
		if err := look.Get(ctx, &res); err != nil {
			return err
		}
		if res.Gone {
			return workflow.ExecuteLocalActivity(ctx, a.Release, t, res.ClaimUID).Get(ctx, nil)
		}
		if res.Wants {
			if err := workflow.ExecuteLocalActivity(ctx, a.Ask, t).Get(ctx, nil); err != nil {
				return err
			}
			workflow.SetCurrentDetails(ctx, "asked the allocator of "+t.Namespace+" for a service")
			hint = waitForChange(ctx, changed, pendingRecheck)
			continue
		}
		binding := ""
		if res.State == primazav1alpha1.ClaimResolved {
			if err := workflow.ExecuteLocalActivity(ctx, a.Bind, t, res.Service).Get(ctx, &binding); err != nil {
				return err
			}
			if binding == "" {
				// The service went between the two steps: resolve again.
				continue
			}
		}
		if err := workflow.ExecuteLocalActivity(ctx, a.Record, t, res, binding).Get(ctx, nil); err != nil {
			return err
		}
		workflow.SetCurrentDetails(ctx, claimDetails(t, res))
		recheck := time.Duration(0)
		if res.State == primazav1alpha1.ClaimPending && workflow.GetVersion(ctx, pendingRechecked, workflow.DefaultVersion, 1) == 1 {
			recheck = pendingRecheck
		}
		hint = waitForChange(ctx, changed, recheck)
	}
	return workflow.NewContinueAsNewError(ctx, ServiceClaim, t)
}
