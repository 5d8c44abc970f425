package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// RepairScope is what a Repair run found to repair, or why it has nothing
// to do.
type RepairScope struct {
	// Found describes the drift (drift.Describe); empty when none is left.
	Found string `json:"found,omitempty"`
	// Skipped says why the run applies nothing: the drift went, or an
	// operation since changed what the instance applies.
	Skipped string `json:"skipped,omitempty"`
}

// startRepair starts inst's Repair run and returns its run ID; "" when an
// operation of the instance runs (it applies the objects anyway) or a
// Repair started by an earlier attempt of this pass does.
func (d *Drift) startRepair(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, found string) (string, error) {
	tg := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: inst.Namespace, Name: inst.Name}
	opts := runs.RepairOptions(tg, fairness.Of(inst, d.Ops.Catalog.Trusted(inst.Namespace)), found)
	opts.EnableEagerStart = opts.EnableEagerStart && !d.Versioned
	run, err := d.Temporal.ExecuteWorkflow(ctx, opts, runs.RepairType, tg)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("starting the Repair run of %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	return run.GetRunID(), nil
}

// RepairScope reads the instance anew and compares it again: the drift a
// Repair run is to undo, if it is still there and the instance still at
// rest from the render its record holds.
func (d *Drift) RepairScope(ctx context.Context, tg lifecycle.Target) (RepairScope, error) {
	inst, plan, err := d.fresh(ctx, tg)
	if err != nil || inst == nil {
		return RepairScope{Skipped: "the instance is gone"}, err
	}
	if !drift.AtRest(inst) {
		return RepairScope{Skipped: "an operation changed the instance since the check"}, nil
	}
	findings, measured, err := d.compare(ctx, inst, plan)
	switch {
	case err != nil:
		return RepairScope{}, err
	case !measured:
		return RepairScope{Skipped: "the instance's record is not of its current render any more"}, nil
	case len(findings) == 0:
		return RepairScope{Skipped: "the drift went before the repair"}, d.recordOutcome(ctx, inst, metav1.ConditionFalse, ReasonNoDrift, "the drift went before the repair")
	}
	return RepairScope{Found: drift.Describe(findings)}, nil
}

// RepairDone compares the instance once more after the Repair run applied
// its objects again (or failed to: failure), and records the outcome:
// condition Drifted False and a Normal Event naming the run and what it
// repaired, or True with the failure or what is still drifted.
func (d *Drift) RepairDone(ctx context.Context, tg lifecycle.Target, repaired, failure string) (string, error) {
	inst, plan, err := d.fresh(ctx, tg)
	if err != nil || inst == nil {
		return "", err
	}
	runID := activity.GetInfo(ctx).WorkflowExecution.RunID
	if failure != "" {
		msg := fmt.Sprintf("repair run %s failed: %s (drifted: %s)", runID, failure, repaired)
		d.event(inst, corev1.EventTypeWarning, ReasonRepairFailed, msg)
		return msg, d.recordOutcome(ctx, inst, metav1.ConditionTrue, ReasonRepairFailed, msg)
	}
	findings, _, err := d.compare(ctx, inst, plan)
	if err != nil {
		return "", err
	}
	if len(findings) > 0 {
		msg := fmt.Sprintf("still drifted after repair run %s: %s", runID, drift.Describe(findings))
		d.event(inst, corev1.EventTypeWarning, ReasonDrifted, msg)
		return msg, d.recordOutcome(ctx, inst, metav1.ConditionTrue, ReasonDrifted, msg)
	}
	msg := fmt.Sprintf("repaired by run %s: %s", runID, repaired)
	d.event(inst, corev1.EventTypeNormal, ReasonRepaired, msg)
	return msg, d.recordOutcome(ctx, inst, metav1.ConditionFalse, ReasonRepaired, msg)
}

// fresh reads the instance from the API server, and its plan; a nil
// instance is gone.
func (d *Drift) fresh(ctx context.Context, tg lifecycle.Target) (*osbv1alpha1.SFServiceInstance, *osbv1alpha1.SFPlan, error) {
	inst := &osbv1alpha1.SFServiceInstance{}
	err := d.Ops.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}, inst)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s/%s: %w", tg.Namespace, tg.Name, err)
	}
	plan, err := d.Ops.Offerings.PlanFor(ctx, inst.Spec.PlanID, inst.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the plan of %s/%s: %w", tg.Namespace, tg.Name, err)
	}
	return inst, plan, nil
}

// recordApplied keeps what an instance's apply sent, for the drift checks
// of a plan that asks for them: the record Secret beside the registry,
// owned by it. A record that holds the same already is not written.
func (a *Operations) recordApplied(ctx context.Context, t *target, registrySecret *corev1.Secret, objs []*unstructured.Unstructured) error {
	if _, ok := drift.Of(t.plan, true); !ok || t.instance == nil || t.binding != nil {
		return nil
	}
	mine := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if o.GetAnnotations()[apply.SingletonAnnotation] != "true" {
			mine = append(mine, o)
		}
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: registrySecret.Name, UID: registrySecret.UID}
	want, err := drift.Secret(t.Namespace, t.Name, owner, drift.NewRecord(t.instance.Generation, t.plan.Generation, mine))
	if err != nil {
		return err
	}
	err = t.kube.Create(ctx, want)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("recording what %s/%s applied: %w", t.Namespace, t.Name, err)
		}
		return nil
	}
	var have corev1.Secret
	if err := t.kube.Get(ctx, ctrlclient.ObjectKeyFromObject(want), &have); err != nil {
		return fmt.Errorf("reading the record of what %s/%s applied: %w", t.Namespace, t.Name, err)
	}
	if string(have.Data[drift.DataKey]) == string(want.Data[drift.DataKey]) && len(have.OwnerReferences) == 1 && have.OwnerReferences[0].UID == owner.UID {
		return nil
	}
	have.Data, have.OwnerReferences, have.Labels = want.Data, want.OwnerReferences, want.Labels
	if err := t.kube.Update(ctx, &have); err != nil {
		return fmt.Errorf("recording what %s/%s applied: %w", t.Namespace, t.Name, err)
	}
	return nil
}
