package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

// ServiceBinding carries one ServiceBinding (servicebinding.io) through its
// life, for as long as it exists, as BindingUsage carries a usage
// (projectionLoop):
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
	var a *activities.ServiceBindings
	return projectionLoop[runs.ServiceBindingTarget, activities.Projection, activities.ProjectionOutcome]{
		workflowType: runs.ServiceBindingType, signal: runs.SignalServiceBindingChanged,
		resolve: a.ResolveServiceBinding, takeBack: a.TakeBackProjection, release: a.ReleaseServiceBinding,
		project: a.Project, record: a.RecordServiceBinding,
		state: func(p activities.Projection) (bool, bool, types.UID, any) {
			if p.Projected == nil {
				return p.Gone, p.Deleting, p.UID, nil
			}
			return p.Gone, p.Deleting, p.UID, *p.Projected
		},
		problem: func(out activities.ProjectionOutcome) bool { return out.Problem != nil },
		details: func(_ activities.Projection, out activities.ProjectionOutcome) string { return projectionDetails(out) },
	}.run(ctx, t)
}

// projectionDetails is what the UI shows of a ServiceBinding's workflow
// while it waits.
func projectionDetails(out activities.ProjectionOutcome) string {
	if out.Problem != nil {
		return fmt.Sprintf("not Ready (%s): %s; waiting for a change", out.Problem.Reason, out.Problem.Message)
	}
	return fmt.Sprintf("Secret %s projected into %s %s; watching them", out.Secret, out.Projected.Kind, strings.Join(out.Projected.Workloads, ", "))
}
