package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// AutoUpdates starts the mass update of a plan whose autoUpdateInstances
// is set, once per generation of its spec (run name
// <namespace>/<plan>/<generation>), and ends the runs of its older
// generations still going: a newer change supersedes them.
type AutoUpdates struct {
	Client   ctrlclient.Client
	Temporal client.Client
}

// setupAutoUpdates registers the reconciler of plan changes, and has keep
// start again the run of a plan's generation that Temporal lost before it
// ended.
// Every shard keeps the runs its own instances call for (a run is one per
// plan's generation, whichever shard starts it again); the first one
// starts them when a plan changes.
func setupAutoUpdates(mgr ctrl.Manager, tc client.Client, copts reconcilerOptions, keep *Loops, reconciles bool) error {
	a := &AutoUpdates{Client: mgr.GetClient(), Temporal: tc}
	keep.add(runKind{name: loops.AutoMassUpdate, workflowType: runs.MassUpdateType, endedCounts: true, wants: a.runs, wake: byRequest(a.Reconcile)})
	if !reconciles {
		return nil
	}
	err := ctrl.NewControllerManagedBy(mgr).Named("sfplan-autoupdate").
		For(&osbv1alpha1.SFPlan{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(copts()).Complete(reconcile.Func(a.Reconcile))
	if err != nil {
		return fmt.Errorf("registering the reconciler of automatic mass updates: %w", err)
	}
	return nil
}

// autoRunName is the name of the automatic mass update of a plan's
// generation.
func autoRunName(plan *osbv1alpha1.SFPlan) string {
	return fmt.Sprintf("%s/%s/%d", plan.Namespace, plan.Name, plan.Generation)
}

// autoUpdates says whether a plan's generation has an automatic mass
// update: it asks for one, and it is not its first generation (a new plan
// has no instances).
func autoUpdates(plan *osbv1alpha1.SFPlan) bool {
	return plan.Spec.AutoUpdateInstances && plan.Generation >= 2 && plan.DeletionTimestamp.IsZero()
}

// runs are the automatic mass updates the plans call for: the run of each
// such plan's generation while one of its instances is not yet current.
// Temporal keeps a run that ended for its namespace's retention; one it
// no longer has with every instance current has nothing left to do.
func (a *AutoUpdates) runs(ctx context.Context) ([]loops.Want, error) {
	var plans osbv1alpha1.SFPlanList
	if err := a.Client.List(ctx, &plans, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the plans: %w", err)
	}
	var instances *osbv1alpha1.SFServiceInstanceList
	var out []loops.Want
	for i := range plans.Items {
		plan := &plans.Items[i]
		if !autoUpdates(plan) {
			continue
		}
		if instances == nil {
			instances = &osbv1alpha1.SFServiceInstanceList{}
			if err := a.Client.List(ctx, instances, ctrlclient.UnsafeDisableDeepCopy); err != nil {
				return nil, fmt.Errorf("listing the instances: %w", err)
			}
		}
		sel := massupdate.Selector{PlanIDs: []string{plan.Spec.ID}}
		if slices.ContainsFunc(instances.Items, func(inst osbv1alpha1.SFServiceInstance) bool {
			return inst.DeletionTimestamp.IsZero() && sel.Matches(&inst) && !massupdate.Current(&inst, plan.Generation)
		}) {
			out = append(out, loops.Want{ID: runs.MassUpdateID(autoRunName(plan)), Namespace: plan.Namespace, Name: plan.Name})
		}
	}
	return out, nil
}

// Reconcile starts the run of the plan's generation, once.
func (a *AutoUpdates) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var plan osbv1alpha1.SFPlan
	if err := a.Client.Get(ctx, req.NamespacedName, &plan); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if !autoUpdates(&plan) {
		return ctrl.Result{}, nil
	}
	prefix := fmt.Sprintf("%s/%s/", plan.Namespace, plan.Name)
	name := autoRunName(&plan)
	if err := a.supersede(ctx, plan.Spec.ID, prefix, plan.Generation); err != nil {
		return ctrl.Result{}, err
	}
	req2 := massupdate.Request{Name: name, Selector: massupdate.Selector{PlanIDs: []string{plan.Spec.ID}}}
	if s := plan.Spec.MassUpdate; s != nil {
		req2.Concurrency = s.Concurrency
		if s.MaxFailures != nil {
			budget, err := massupdate.ParseBudget(s.MaxFailures.String())
			if err != nil {
				return ctrl.Result{}, nil // the CRD's pattern keeps this out
			}
			req2.MaxFailures = budget
		}
	}
	_, err := a.Temporal.ExecuteWorkflow(ctx, runs.MassUpdateOptions(name, plan.Spec.ID,
		fmt.Sprintf("mass update of plan %s to generation %d (autoUpdateInstances)", plan.Spec.Name, plan.Generation),
		"the watcher, for autoUpdateInstances of plan "+plan.Namespace+"/"+plan.Name),
		runs.MassUpdateType, req2)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return ctrl.Result{}, fmt.Errorf("starting the mass update %s: %w", name, err)
	}
	return ctrl.Result{}, nil
}

// supersede ends the plan's runs of older generations that still go.
func (a *AutoUpdates) supersede(ctx context.Context, planID, prefix string, generation int64) error {
	resp, err := a.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = %q AND PlanID = %q AND ExecutionStatus = 'Running'", runs.MassUpdateType, planID),
	})
	if err != nil {
		return fmt.Errorf("listing the mass updates of plan %s: %w", planID, err)
	}
	for _, e := range resp.GetExecutions() {
		id := e.GetExecution().GetWorkflowId()
		older, err := strconv.ParseInt(strings.TrimPrefix(id, runs.MassUpdateID(prefix)), 10, 64)
		if !strings.HasPrefix(id, runs.MassUpdateID(prefix)) || err != nil || older >= generation {
			continue
		}
		steer := massupdate.Steer{Action: massupdate.Cancel, Reason: fmt.Sprintf("superseded by generation %d of the plan", generation)}
		if err := a.Temporal.SignalWorkflow(ctx, id, "", runs.SignalSteer, steer); err != nil {
			var gone *serviceerror.NotFound
			if !errors.As(err, &gone) {
				return fmt.Errorf("ending the superseded mass update %s: %w", id, err)
			}
		}
	}
	return nil
}
