package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/limits"
)

// planIDField selects an SFServiceInstance by its plan on the API server
// (the CRD's selectable field).
const planIDField = "spec.planId"

// checkPlanLimit fails a provision beyond its plan's maxInstances, or an
// update that moves an instance onto a plan at its maxInstances, before
// anything is applied. The instances are read from the API server, in
// every namespace, as metadata only: a plan's thousands of instances are a
// small read, and only at a provision.
func (a *Operations) checkPlanLimit(ctx context.Context, t *target) error {
	max := t.plan.Spec.MaxInstances
	if max == nil {
		return nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(osbv1alpha1.GroupVersion.WithKind("SFServiceInstanceList"))
	if err := a.Client.List(ctx, list, client.MatchingFields{planIDField: t.instance.Spec.PlanID}); err != nil {
		return fmt.Errorf("counting the instances of plan %q: %w", t.plan.Spec.Name, err)
	}
	all := make([]limits.Instance, 0, len(list.Items))
	for _, i := range list.Items {
		all = append(all, counted(&i))
	}
	l := limits.Limit{Of: fmt.Sprintf("plan %q", t.plan.Spec.Name), Max: int(*max)}
	var exceeded *limits.Exceeded
	if err := limits.Place(l, all, counted(t.instance)); errors.As(err, &exceeded) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrLimit, nil)
	}
	return nil
}

// movesPlan says whether an update moves the instance onto another plan
// than the one it was last provisioned or updated with.
func (t *target) movesPlan() bool {
	applied := t.instance.Status.AppliedSpec
	return applied != nil && applied.PlanID != t.instance.Spec.PlanID
}

// counted is what limits need of an instance.
func counted(obj metav1.Object) limits.Instance {
	return limits.Instance{Namespace: obj.GetNamespace(), Name: obj.GetName(), Deleting: obj.GetDeletionTimestamp() != nil}
}
