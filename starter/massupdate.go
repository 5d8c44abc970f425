package starter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
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

// setupAutoUpdates registers the reconciler of plan changes.
func setupAutoUpdates(mgr ctrl.Manager, tc client.Client, copts reconcilerOptions) error {
	a := &AutoUpdates{Client: mgr.GetClient(), Temporal: tc}
	err := ctrl.NewControllerManagedBy(mgr).Named("sfplan-autoupdate").
		For(&osbv1alpha1.SFPlan{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(copts()).Complete(ReconcilerFunc(a.Reconcile))
	if err != nil {
		return fmt.Errorf("registering the reconciler of automatic mass updates: %w", err)
	}
	return nil
}

// Reconcile starts the run of the plan's generation, once.
func (a *AutoUpdates) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var plan osbv1alpha1.SFPlan
	if err := a.Client.Get(ctx, req.NamespacedName, &plan); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	// A new plan has no instances; its first generation needs no run.
	if !plan.Spec.AutoUpdateInstances || plan.Generation < 2 || !plan.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	prefix := fmt.Sprintf("%s/%s/", plan.Namespace, plan.Name)
	name := prefix + strconv.FormatInt(plan.Generation, 10)
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
	_, err := a.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       runs.MassUpdateID(name),
		TaskQueue:                                runs.TaskQueue,
		WorkflowTaskTimeout:                      runs.WorkflowTaskTimeout,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes: temporal.NewSearchAttributes(runs.AttrKind.ValueSet(runs.MassUpdateType), runs.AttrName.ValueSet(name),
			runs.AttrPlan.ValueSet(plan.Spec.ID), runs.AttrState.ValueSet(massupdate.Running)),
		StaticSummary: fmt.Sprintf("mass update of plan %s to generation %d (autoUpdateInstances)", plan.Spec.Name, plan.Generation),
		StaticDetails: "qm mass-update status " + name,
	}, runs.MassUpdateType, req2)
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
