package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

// ServiceBinding carries one ServiceBinding (servicebinding.io) through its
// life, for as long as it exists, as BindingUsage carries a usage:
//
//  1. resolve what it names: the service's Secret, and the workloads (by
//     name or selector) with where their pod template is;
//  2. project the Secret into them (taking it back first from workloads
//     no longer selected);
//  3. record the conditions on the ServiceBinding;
//  4. wait until the watcher signals a change of it, its service, the
//     Secret, its workloads or their mapping (one that is not Ready also
//     looks again after a minute), and go back to 1;
//  5. once it is deleted, take the projection back, then the finalizer.
func ServiceBinding(ctx workflow.Context, t runs.ServiceBindingTarget) error {
	ctx = retriedUntilDone(ctx)
	var a *activities.ServiceBindings
	changed := workflow.GetSignalChannel(ctx, runs.SignalServiceBindingChanged)
	for passes := 0; passes < usagePassesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		var p activities.Projection
		if err := workflow.ExecuteLocalActivity(ctx, a.ResolveServiceBinding, t).Get(ctx, &p); err != nil {
			return err
		}
		if p.Gone {
			return nil
		}
		if p.Deleting {
			if p.Projected != nil {
				if err := workflow.ExecuteLocalActivity(ctx, a.TakeBackProjection, t, p.UID, *p.Projected).Get(ctx, nil); err != nil {
					return err
				}
			}
			return workflow.ExecuteLocalActivity(ctx, a.ReleaseServiceBinding, t).Get(ctx, nil)
		}
		var out activities.ProjectionOutcome
		if err := workflow.ExecuteLocalActivity(ctx, a.Project, t, p).Get(ctx, &out); err != nil {
			return err
		}
		if err := workflow.ExecuteLocalActivity(ctx, a.RecordServiceBinding, t, out).Get(ctx, nil); err != nil {
			return err
		}
		workflow.SetCurrentDetails(ctx, projectionDetails(out))
		waitForChange(ctx, changed, retryIf(out.Problem != nil))
	}
	// By its registered name: the function's own name is not registered.
	return workflow.NewContinueAsNewError(ctx, runs.ServiceBindingType, t)
}

// projectionDetails is what the UI shows of a ServiceBinding's workflow
// while it waits.
func projectionDetails(out activities.ProjectionOutcome) string {
	if out.Problem != nil {
		return fmt.Sprintf("not Ready (%s): %s; waiting for a change", out.Problem.Reason, out.Problem.Message)
	}
	return fmt.Sprintf("Secret %s projected into %s %s; watching them", out.Secret, out.Projected.Kind, strings.Join(out.Projected.Workloads, ", "))
}
