package activities

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
)

// ConditionProjected is the claim's condition that says whether its
// application carries its credentials.
const ConditionProjected = "Projected"

// project makes a claim's application receive its credentials, as Primaza
// does, through a servicebinding.io ServiceBinding of the claim's name
// that the claim owns (the ServiceBindings' workflow does the projecting):
// it exists while the claim is resolved (bound) and names an application,
// and is deleted otherwise, which takes the projection back. It returns
// how many workloads carry the projection now, and the condition that
// says so (nil: the claim names no application).
func (c *Claims) project(ctx context.Context, claim *primazav1alpha1.ServiceClaim, bound bool) (int, *metav1.Condition, error) {
	cond := func(status metav1.ConditionStatus, reason, format string, args ...any) *metav1.Condition {
		return &metav1.Condition{Type: ConditionProjected, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...), ObservedGeneration: claim.Generation}
	}
	app := claim.Spec.Application
	if app == nil && meta.FindStatusCondition(claim.Status.Conditions, ConditionProjected) == nil {
		// Never projected: nothing to read or take back. Most claims name
		// no application; their passes cost no extra read.
		return 0, nil, nil
	}
	var sb sbv1.ServiceBinding
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, &sb)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return 0, nil, fmt.Errorf("reading the claim's ServiceBinding: %w", err)
	case !metav1.IsControlledBy(&sb, claim):
		if app == nil {
			return 0, nil, nil
		}
		return 0, cond(metav1.ConditionFalse, "NameTaken", "a ServiceBinding %s that is not the claim's exists: Quartermaster projects the claim through one of the claim's name", claim.Name), nil
	}
	if target := claim.Spec.TargetContext(); app != nil && target != nil && target.Namespace != claim.Namespace {
		return 0, cond(metav1.ConditionFalse, "OtherNamespace", "the application's namespace %s is not the claim's: the credentials are projected within the claim's namespace", target.Namespace), c.unproject(ctx, claim, &sb, err == nil)
	}
	if app == nil || !bound {
		if err := c.unproject(ctx, claim, &sb, err == nil); err != nil {
			return 0, nil, err
		}
		if app == nil {
			return 0, nil, nil
		}
		return 0, cond(metav1.ConditionFalse, "NotResolved", "the claim holds no service: nothing is projected"), nil
	}
	want := sbv1.ServiceBindingSpec{
		Name:     claim.Name,
		Service:  sbv1.ServiceBindingServiceReference{APIVersion: primazav1alpha1.GroupVersion.String(), Kind: "ServiceClaim", Name: claim.Name},
		Workload: sbv1.ServiceBindingWorkloadReference{APIVersion: app.APIVersion, Kind: app.Kind, Name: app.Name, Selector: app.Selector},
	}
	for _, e := range claim.Spec.Envs {
		want.Env = append(want.Env, sbv1.EnvMapping{Name: e.Name, Key: e.Key})
	}
	sb = sbv1.ServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c.Client, &sb, func() error {
		sb.Spec = want
		return controllerutil.SetControllerReference(claim, &sb, c.Client.Scheme())
	}); err != nil {
		return 0, nil, fmt.Errorf("writing the claim's ServiceBinding: %w", err)
	}
	ready := meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady)
	switch {
	case ready == nil || ready.ObservedGeneration != sb.Generation:
		return 0, cond(metav1.ConditionFalse, "Projecting", "ServiceBinding %s is projecting the credentials into %s", sb.Name, app.Kind), nil
	case ready.Status != metav1.ConditionTrue:
		return 0, cond(metav1.ConditionFalse, ready.Reason, "ServiceBinding %s: %s", sb.Name, ready.Message), nil
	}
	n := 0
	if sb.Status.Projected != nil {
		n = len(sb.Status.Projected.Workloads)
	}
	return n, cond(metav1.ConditionTrue, "Projected", "the credentials are projected into %d %s workloads (ServiceBinding %s)", n, app.Kind, sb.Name), nil
}

// recordProjection projects (or takes back) the claim's credentials, and
// puts how far that went into its status st.
func (c *Claims) recordProjection(ctx context.Context, claim *primazav1alpha1.ServiceClaim, st *primazav1alpha1.ServiceClaimStatus, bound bool) error {
	n, cond, err := c.project(ctx, claim, bound)
	if err != nil {
		return err
	}
	st.Projected = n
	if cond == nil {
		meta.RemoveStatusCondition(&st.Conditions, ConditionProjected)
		return nil
	}
	meta.SetStatusCondition(&st.Conditions, *cond)
	return nil
}

// unproject deletes the claim's ServiceBinding, if it exists: its
// workflow takes the projection back before it goes.
func (c *Claims) unproject(ctx context.Context, claim *primazav1alpha1.ServiceClaim, sb *sbv1.ServiceBinding, exists bool) error {
	if !exists || !metav1.IsControlledBy(sb, claim) {
		return nil
	}
	if err := c.Client.Delete(ctx, sb); ctrlclient.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the claim's ServiceBinding: %w", err)
	}
	return nil
}
