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

// startRepair starts t's Repair run and returns its run ID; "" when an
// operation of t runs (it applies the objects anyway) or a Repair started
// by an earlier attempt of this pass does.
func (d *Drift) startRepair(ctx context.Context, t *target, found string) (string, error) {
	opts := runs.RepairOptions(t.Target, fairness.Of(t.object(), d.Ops.Catalog.Trusted(t.Namespace)), found)
	opts.EnableEagerStart = opts.EnableEagerStart && !d.Versioned
	run, err := d.Temporal.ExecuteWorkflow(ctx, opts, runs.RepairType, t.Target)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("starting the Repair run of %s/%s: %w", t.Namespace, t.Name, err)
	}
	return run.GetRunID(), nil
}

// RepairScope reads the instance or binding anew and compares it again:
// the drift a Repair run is to undo, if it is still there and the target
// still at rest from the render its record holds.
func (d *Drift) RepairScope(ctx context.Context, tg lifecycle.Target) (RepairScope, error) {
	t, err := d.fresh(ctx, tg)
	if err != nil || t == nil {
		gone := "the instance is gone"
		if tg.Kind == lifecycle.KindBinding {
			gone = "the binding or its instance is gone"
		}
		return RepairScope{Skipped: gone}, err
	}
	if !drift.AtRest(t.object()) {
		return RepairScope{Skipped: "an operation changed the " + noun(tg) + " since the check"}, nil
	}
	findings, measured, err := d.compare(ctx, t)
	switch {
	case err != nil:
		return RepairScope{}, err
	case !measured:
		return RepairScope{Skipped: "the " + noun(tg) + "'s record is not of its current render any more"}, nil
	case len(findings) == 0:
		return RepairScope{Skipped: "the drift went before the repair"}, d.recordOutcome(ctx, t.object(), metav1.ConditionFalse, ReasonNoDrift, "the drift went before the repair")
	}
	return RepairScope{Found: drift.Describe(findings)}, nil
}

// RepairDone compares the instance or binding once more after the Repair
// run applied its objects again (or failed to: failure), and records the
// outcome: condition Drifted False and a Normal Event naming the run and
// what it repaired, or True with the failure or what is still drifted.
func (d *Drift) RepairDone(ctx context.Context, tg lifecycle.Target, repaired, failure string) (string, error) {
	t, err := d.fresh(ctx, tg)
	if err != nil || t == nil {
		return "", err
	}
	obj := t.object()
	runID := activity.GetInfo(ctx).WorkflowExecution.RunID
	if failure != "" {
		msg := fmt.Sprintf("repair run %s failed: %s (drifted: %s)", runID, failure, repaired)
		d.event(obj, corev1.EventTypeWarning, ReasonRepairFailed, msg)
		return msg, d.recordOutcome(ctx, obj, metav1.ConditionTrue, ReasonRepairFailed, msg)
	}
	findings, _, err := d.compare(ctx, t)
	if err != nil {
		return "", err
	}
	if len(findings) > 0 {
		msg := fmt.Sprintf("still drifted after repair run %s: %s", runID, drift.Describe(findings))
		d.event(obj, corev1.EventTypeWarning, ReasonDrifted, msg)
		return msg, d.recordOutcome(ctx, obj, metav1.ConditionTrue, ReasonDrifted, msg)
	}
	msg := fmt.Sprintf("repaired by run %s: %s", runID, repaired)
	d.event(obj, corev1.EventTypeNormal, ReasonRepaired, msg)
	return msg, d.recordOutcome(ctx, obj, metav1.ConditionFalse, ReasonRepaired, msg)
}

// noun names the kind of tg in a sentence.
func noun(tg lifecycle.Target) string {
	if tg.Kind == lifecycle.KindBinding {
		return "binding"
	}
	return "instance"
}

// fresh reads the instance or binding from the API server (a binding with
// its instance), and its plan; nil when it is gone (or, for a binding,
// its instance is: its unbind comes).
func (d *Drift) fresh(ctx context.Context, tg lifecycle.Target) (*target, error) {
	t := &target{Target: tg}
	instName := tg.Name
	if tg.Kind == lifecycle.KindBinding {
		t.binding = &osbv1alpha1.SFServiceBinding{}
		if err := d.Ops.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}, t.binding); err != nil {
			return nil, ignoreGone(err, tg)
		}
		instName = t.binding.Spec.InstanceID
	}
	t.instance = &osbv1alpha1.SFServiceInstance{}
	if err := d.Ops.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tg.Namespace, Name: instName}, t.instance); err != nil {
		return nil, ignoreGone(err, tg)
	}
	plan, err := d.Ops.Offerings.PlanFor(ctx, t.planID(), tg.Namespace)
	if err != nil {
		return nil, fmt.Errorf("reading the plan of %s/%s: %w", tg.Namespace, tg.Name, err)
	}
	t.plan = plan
	return t, nil
}

// ignoreGone is nil for an object that is not found, and err with its
// target's name otherwise.
func ignoreGone(err error, tg lifecycle.Target) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("reading %s %s/%s: %w", noun(tg), tg.Namespace, tg.Name, err)
}

// recordApplied keeps what a provision's, update's or bind's apply sent,
// for the drift checks of a plan that asks for them: the record Secret
// beside the registry, owned by it. A record that holds the same already
// is not written. (An unbind's objects are not the binding's to keep.)
func (a *Operations) recordApplied(ctx context.Context, t *target, op lifecycle.Operation, registrySecret *corev1.Secret, objs []*unstructured.Unstructured) error {
	if _, ok := drift.Of(t.plan, true); !ok || t.instance == nil || op == lifecycle.OpUnbind {
		return nil
	}
	mine := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if o.GetAnnotations()[apply.SingletonAnnotation] != "true" {
			mine = append(mine, o)
		}
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: registrySecret.Name, UID: registrySecret.UID}
	want, err := drift.Secret(t.Kind, t.Namespace, t.Name, owner, drift.NewRecord(t.object().GetGeneration(), t.plan.Generation, mine))
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
