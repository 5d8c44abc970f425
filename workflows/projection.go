package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// usagePassesPerRun bounds a projection loop's history: it continues
	// as new after this many passes, or sooner if Temporal asks.
	usagePassesPerRun = 200
	// usageRetry is how long a loop that is not Ready waits for a signal
	// before it looks again by itself: what it waits for may be a change
	// nothing watches (RBAC granted).
	usageRetry = time.Minute
)

// projectionLoop is the life of a resource that projects credentials into
// workloads for as long as it exists: a ServiceBindingUsage (BindingUsage)
// and a ServiceBinding (ServiceBinding) each run it over their own steps,
// every step a local activity of theirs:
//
//  1. resolve what the resource names (R);
//  2. project (O), taking the projection back first from what it no
//     longer names;
//  3. record the outcome on the resource;
//  4. wait for the watcher's signal of a change (or, with a problem, at
//     most usageRetry), and go back to 1;
//  5. once it is deleted, take back what it projected, then let it go.
type projectionLoop[T, R, O any] struct {
	workflowType, signal string
	// resolve(T) R; takeBack(T, types.UID, what was projected);
	// release(T); project(T, R) O; record(T, O).
	resolve, takeBack, release, project, record any
	// state reads what resolve found: the resource is gone, or being
	// deleted, its UID, and what it has projected (nil: nothing).
	state func(R) (gone, deleting bool, uid types.UID, projected any)
	// problem says whether the outcome is not Ready; details is what the
	// UI shows while the loop waits.
	problem func(O) bool
	details func(R, O) string
}

// run carries t through its life, continuing as new (by its registered
// name: the function's own name is not registered) before its history
// grows long.
func (l projectionLoop[T, R, O]) run(ctx workflow.Context, t T) error {
	// What a resource cannot do is an outcome, not a failure.
	ctx = retriedUntilDone(ctx)
	changed := workflow.GetSignalChannel(ctx, l.signal)
	for passes := 0; passes < usagePassesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		var r R
		if err := workflow.ExecuteLocalActivity(ctx, l.resolve, t).Get(ctx, &r); err != nil {
			return err
		}
		gone, deleting, uid, projected := l.state(r)
		if gone {
			return nil
		}
		if deleting {
			if projected != nil {
				if err := workflow.ExecuteLocalActivity(ctx, l.takeBack, t, uid, projected).Get(ctx, nil); err != nil {
					return err
				}
			}
			return workflow.ExecuteLocalActivity(ctx, l.release, t).Get(ctx, nil)
		}
		var out O
		if err := workflow.ExecuteLocalActivity(ctx, l.project, t, r).Get(ctx, &out); err != nil {
			return err
		}
		if err := workflow.ExecuteLocalActivity(ctx, l.record, t, out).Get(ctx, nil); err != nil {
			return err
		}
		workflow.SetCurrentDetails(ctx, l.details(r, out))
		waitForChange(ctx, changed, retryIf(l.problem(out)))
	}
	return workflow.NewContinueAsNewError(ctx, l.workflowType, t)
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
