package activities

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// RemoveBindings deletes the bindings of an instance being deprovisioned,
// so that each is unbound by its own Unbind run (the watcher starts them),
// as Kubernetes removes an owner's dependents first. It returns how many
// are left, and says so in the instance's status while any are.
func (a *Operations) RemoveBindings(ctx context.Context, tg lifecycle.Target) (int, error) {
	t, err := a.loadObjects(ctx, tg, lifecycle.OpDeprovision)
	if err != nil {
		return 0, err
	}
	var list osbv1alpha1.SFServiceBindingList
	if err := a.Client.List(ctx, &list, client.InNamespace(tg.Namespace)); err != nil {
		return 0, fmt.Errorf("listing the bindings of instance %s/%s: %w", tg.Namespace, tg.Name, err)
	}
	left := 0
	for i := range list.Items {
		b := &list.Items[i]
		if b.Spec.InstanceID != tg.Name {
			continue
		}
		left++
		if b.DeletionTimestamp != nil {
			continue
		}
		if err := a.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("deleting binding %s/%s of the instance: %w", b.Namespace, b.Name, err)
		}
	}
	description := inProgressDescription(lifecycle.OpDeprovision)
	switch {
	case left == 1:
		description = "waiting for 1 binding to be unbound"
	case left > 1:
		description = fmt.Sprintf("waiting for %d bindings to be unbound", left)
	}
	if _, _, current := t.status(); current != description {
		if err := a.patchStatus(ctx, t, func(s *status) { s.Description = description }); err != nil {
			return 0, err
		}
	}
	return left, nil
}
