package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// rotationPassesPerRun bounds a rotation run's history: it continues as new
// after this many passes, or sooner when Temporal suggests it.
const rotationPassesPerRun = 200

// rotationRetry is how long a rotation that failed waits before it is
// tried again, unless a change comes first (the force annotation, a
// changed policy).
const rotationRetry = time.Minute

// CredentialRotation keeps the credentials of one rotating binding fresh,
// for as long as the binding exists (its Bind publishes the first ones):
//
//  1. read the binding and what is due (activities.Rotations.RotationState);
//  2. unbind each successor whose overlap is over;
//  3. when a rotation is due (the schedule, or the force annotation), bind
//     a successor, wait for its bind, and publish its credentials in the
//     binding's Secret; a successor that fails leaves the credentials as
//     they are and the binding's Rotated condition says why;
//  4. sleep until the next of those falls due, or the watcher signals a
//     change, and go back to 1. Once the binding is gone, the run ends:
//     the binding's Unbind takes its successors away.
func CredentialRotation(ctx workflow.Context, t lifecycle.Target) error {
	ctx = retriedUntilDone(ctx)
	var r *activities.Rotations
	changed := workflow.GetSignalChannel(ctx, runs.SignalRotationChanged)
	s := &steps{t: t, op: lifecycle.OpBind, visible: true}
	for passes := 0; passes < rotationPassesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		var st activities.RotationState
		if err := workflow.ExecuteLocalActivity(ctx, r.RotationState, t).Get(ctx, &st); err != nil {
			return err
		}
		if st.Gone || !st.Rotates {
			return nil
		}
		for _, name := range st.Plan.Retire {
			if err := workflow.ExecuteLocalActivity(ctx, r.RetireSuccessor, t, name).Get(ctx, nil); err != nil {
				return err
			}
		}
		retry := time.Duration(0)
		if st.Plan.Rotate {
			o := rotateTo(ctx, s, st.Generation+1, st.MaxPolling, st.Plan.Why)
			if o.State == osbv1alpha1.StateSucceeded {
				continue
			}
			retry = rotationRetry
		}
		if !st.Plan.Wake.IsZero() {
			wait := st.Plan.Wake.Sub(workflow.Now(ctx))
			if retry == 0 || wait < retry {
				retry = max(wait, time.Millisecond)
			}
		}
		workflow.SetCurrentDetails(ctx, rotationDetails(st, retry))
		waitForChange(ctx, changed, retry)
	}
	return workflow.NewContinueAsNewError(ctx, runs.CredentialRotationType, t)
}

// rotationDetails is what the UI shows of a rotation run while it waits.
func rotationDetails(st activities.RotationState, wait time.Duration) string {
	if wait == 0 {
		return fmt.Sprintf("generation %d published; waiting for a change", st.Generation)
	}
	return fmt.Sprintf("generation %d published; next look in %s", st.Generation, wait.Round(time.Second))
}

// rotateTo binds the successor of generation gen and publishes its
// credentials once its bind succeeds; a bind that fails, or does not end
// within maxPolling, is recorded as the rotation's failure, and the
// credentials published stay.
func rotateTo(ctx workflow.Context, s *steps, gen int64, maxPolling time.Duration, why string) activities.Outcome {
	var r *activities.Rotations
	t := s.t
	fail := func(description string) activities.Outcome {
		o := activities.Outcome{State: osbv1alpha1.StateFailed, Kind: activities.ErrRotation,
			Description: fmt.Sprintf("rotation to generation %d failed: %s", gen, description)}
		if err := workflow.ExecuteLocalActivity(ctx, r.RotationFailed, t, gen, description).Get(ctx, nil); err != nil {
			o.Description += fmt.Sprintf(" (and recording it failed: %v)", message(err))
		}
		return o
	}
	if err := workflow.ExecuteLocalActivity(ctx, r.BindSuccessor, t, gen).Get(ctx, nil); err != nil {
		return fail(message(err))
	}
	polls := newBackoff(workflow.Now(ctx).Add(maxPolling), pollFirst, pollMax)
	for {
		var so activities.SuccessorOutcome
		if err := workflow.ExecuteLocalActivity(ctx, r.SuccessorState, t, gen).Get(ctx, &so); err != nil {
			return fail(message(err))
		}
		switch so.State {
		case osbv1alpha1.StateSucceeded:
			if err := workflow.ExecuteLocalActivity(ctx, r.PublishSuccessor, t, gen, why).Get(ctx, nil); err != nil {
				return fail(message(err))
			}
			return activities.Outcome{State: osbv1alpha1.StateSucceeded, Description: fmt.Sprintf("credentials of generation %d published (%s)", gen, why)}
		case osbv1alpha1.StateFailed:
			return fail("the successor's bind failed: " + so.Description)
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("rotating to generation %d (%s): the successor's bind is %s", gen, why, so.State))
		left := polls.left(ctx)
		if left <= 0 {
			return fail(fmt.Sprintf("the successor's bind did not end within the plan's maximum_polling_duration of %s (last: %s)", maxPolling, so.Description))
		}
		if err := polls.sleep(ctx, s, left, "wait for the successor's bind"); err != nil {
			return fail(message(err))
		}
	}
}

// firstCredentials is the bind of a rotating binding: it publishes the
// credentials of its first successor (or finds them published already,
// for a spec change that asks for nothing new).
func firstCredentials(ctx workflow.Context, s *steps, begun activities.Begun) activities.Outcome {
	if begun.RotationGeneration > 0 {
		return activities.Outcome{State: osbv1alpha1.StateSucceeded,
			Description: fmt.Sprintf("credentials rotate; generation %d is published", begun.RotationGeneration)}
	}
	return rotateTo(ctx, s, 1, begun.MaxPolling, "first credentials")
}

// waitForSuccessors is the unbind of a rotating binding: it deletes the
// successors, each then unbound by its own Unbind run, and waits on
// durable timers until they are gone; the outcome is failed when they are
// not gone within the plan's maximum polling duration.
func waitForSuccessors(ctx workflow.Context, s *steps, maxPolling time.Duration) activities.Outcome {
	var r *activities.Rotations
	polls := newBackoff(workflow.Now(ctx).Add(maxPolling), pollFirst, pollMax)
	for {
		var left int
		if err := workflow.ExecuteLocalActivity(ctx, r.RemoveSuccessors, s.t).Get(ctx, &left); err != nil {
			return failed(lifecycle.OpUnbind, err)
		}
		if left == 0 {
			return activities.Outcome{State: osbv1alpha1.StateSucceeded}
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting for %d successor bindings to be unbound", left))
		wait := polls.left(ctx)
		if wait <= 0 {
			return activities.Outcome{State: osbv1alpha1.StateFailed, Kind: KindTimeout,
				Description: fmt.Sprintf("unbind failed: %d successor bindings were not unbound within the plan's maximum_polling_duration of %s", left, maxPolling)}
		}
		if err := polls.sleep(ctx, s, wait, "wait for the successors to go"); err != nil {
			return failed(lifecycle.OpUnbind, err)
		}
	}
}
