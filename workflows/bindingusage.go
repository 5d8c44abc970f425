package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

// BindingUsage carries one ServiceBindingUsage through its life, for as
// long as the usage exists (projectionLoop):
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
	var a *activities.BindingUsages
	return projectionLoop[runs.UsageTarget, activities.Usage, activities.UsageOutcome]{
		workflowType: runs.BindingUsageType, signal: runs.SignalUsageChanged,
		resolve: a.ResolveUsage, takeBack: a.RemoveInjection, release: a.ReleaseUsage, project: a.Inject, record: a.RecordUsage,
		state: func(u activities.Usage) (bool, bool, types.UID, any) {
			if u.Injected == nil {
				return u.Gone, u.Deleting, u.UID, nil
			}
			return u.Gone, u.Deleting, u.UID, *u.Injected
		},
		problem: func(out activities.UsageOutcome) bool { return out.Problem != nil },
		details: usageDetails,
	}.run(ctx, t)
}

// usageDetails is what the UI shows of a usage's workflow while it waits.
func usageDetails(u activities.Usage, out activities.UsageOutcome) string {
	if out.Problem != nil {
		return fmt.Sprintf("%s (%s): %s; waiting for a change", out.Problem.State, out.Problem.Reason, out.Problem.Message)
	}
	return fmt.Sprintf("%s from Secret %s injected into %s %s; watching it", u.Binding, out.Secret, out.Injected.Kind.Resource.Kind, out.Injected.Workload)
}
