package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

const (
	// usagePassesPerRun bounds a usage's history: it continues as new after
	// this many passes, or sooner if Temporal asks.
	usagePassesPerRun = 200
	// usageRetry is how long a usage that is not Ready waits for a signal
	// before it looks again by itself: what it waits for may be a change
	// nothing watches (RBAC granted).
	usageRetry = time.Minute
)

// BindingUsage carries one ServiceBindingUsage through its life, for as
// long as the usage exists:
//
//  1. resolve what it names: its UsageKind, its workload and its binding;
//  2. inject the binding's credentials into the workload (removing them
//     first from a workload it no longer names);
//  3. record the outcome on the usage;
//  4. wait until the watcher signals a change of the usage, its kind, its
//     workload, its binding or the binding's Secret (a usage that is not
//     Ready also looks again after a minute), and go back to 1;
//  5. once the usage is deleted, remove the injection, then the finalizer.
func BindingUsage(ctx workflow.Context, t runs.UsageTarget) error {
	// What a usage cannot do is an outcome, not a failure.
	ctx = retriedUntilDone(ctx)
	var a *activities.BindingUsages
	changed := workflow.GetSignalChannel(ctx, runs.SignalUsageChanged)
	for passes := 0; passes < usagePassesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		var u activities.Usage
		if err := workflow.ExecuteLocalActivity(ctx, a.ResolveUsage, t).Get(ctx, &u); err != nil {
			return err
		}
		if u.Gone {
			return nil
		}
		if u.Deleting {
			if u.Injected != nil {
				if err := workflow.ExecuteLocalActivity(ctx, a.RemoveInjection, t, u.UID, *u.Injected).Get(ctx, nil); err != nil {
					return err
				}
			}
			return workflow.ExecuteLocalActivity(ctx, a.ReleaseUsage, t).Get(ctx, nil)
		}
		var out activities.UsageOutcome
		if err := workflow.ExecuteLocalActivity(ctx, a.Inject, t, u).Get(ctx, &out); err != nil {
			return err
		}
		if err := workflow.ExecuteLocalActivity(ctx, a.RecordUsage, t, out).Get(ctx, nil); err != nil {
			return err
		}
		workflow.SetCurrentDetails(ctx, usageDetails(u, out))
		waitForChange(ctx, changed, retryIf(out.Problem != nil))
	}
	// By its registered name: the function's own name is not registered.
	return workflow.NewContinueAsNewError(ctx, runs.BindingUsageType, t)
}

// waitForChange waits for a signal on changed, or at most retryAfter when
// it is not zero, and returns the last non-empty value signalled (a claim's
// allocator names the service it gave).
func waitForChange(ctx workflow.Context, changed workflow.ReceiveChannel, retryAfter time.Duration) string {
	var got string
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(changed, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &got) })
	cancel := func() {}
	if retryAfter > 0 {
		var tctx workflow.Context
		tctx, cancel = workflow.WithCancel(ctx)
		sel.AddFuture(workflow.NewTimer(tctx, retryAfter), func(workflow.Future) {})
	}
	sel.Select(ctx)
	cancel()
	for _, v := range drain(changed, nil) {
		if v != "" {
			got = v
		}
	}
	return got
}

// retryIf is usageRetry for a usage or a projection with a problem, and
// no retry (a signal alone) for one without.
func retryIf(problem bool) time.Duration {
	if problem {
		return usageRetry
	}
	return 0
}

// usageDetails is what the UI shows of a usage's workflow while it waits.
func usageDetails(u activities.Usage, out activities.UsageOutcome) string {
	if out.Problem != nil {
		return fmt.Sprintf("%s (%s): %s; waiting for a change", out.Problem.State, out.Problem.Reason, out.Problem.Message)
	}
	return fmt.Sprintf("%s from Secret %s injected into %s %s; watching it", u.Binding, out.Secret, out.Injected.Kind.Resource.Kind, out.Injected.Workload)
}
