package activities

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// RemoveBindings waits for the users of an instance being deprovisioned,
// or removes its bindings. By default (a kubectl delete) it deletes
// nothing: it names the instance's users (its bindings, the claim holding
// it) in condition InUse and the status, and returns how many are left,
// so that the deprovision waits until they go. With the annotation
// DeprovisionInUseAnnotation (set by the OSB API as it deprovisions, or by
// a kubectl user) it deletes the bindings, so that each is unbound by its
// own Unbind run (the watcher starts them), and returns how many are left.
func (a *Operations) RemoveBindings(ctx context.Context, tg lifecycle.Target) (int, error) {
	t, err := a.loadObjects(ctx, tg, lifecycle.OpDeprovision)
	if err != nil {
		return 0, err
	}
	var list osbv1alpha1.SFServiceBindingList
	if err := a.Client.List(ctx, &list, client.InNamespace(tg.Namespace)); err != nil {
		return 0, fmt.Errorf("listing the bindings of instance %s/%s: %w", tg.Namespace, tg.Name, err)
	}
	bindings := slices.DeleteFunc(list.Items, func(b osbv1alpha1.SFServiceBinding) bool { return b.Spec.InstanceID != tg.Name })
	if t.instance == nil || t.instance.Annotations[osbv1alpha1.DeprovisionInUseAnnotation] != "true" {
		return a.waitForUsers(ctx, t, bindings)
	}
	for i := range bindings {
		b := &bindings[i]
		if b.DeletionTimestamp != nil {
			continue
		}
		if err := a.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("deleting binding %s/%s of the instance: %w", b.Namespace, b.Name, err)
		}
	}
	left := len(bindings)
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

// waitForUsers names what still uses the instance, in its status and
// condition InUse (written when they change), and returns how many.
func (a *Operations) waitForUsers(ctx context.Context, t *target, bindings []osbv1alpha1.SFServiceBinding) (int, error) {
	users, err := a.users(ctx, t.instance, bindings)
	if err != nil {
		return 0, err
	}
	cond := inUse(users, t.instance.Generation)
	was := meta.FindStatusCondition(t.instance.Status.Conditions, osbv1alpha1.ConditionInUse)
	if len(users) == 0 && was == nil {
		return 0, nil // never waited: nothing to say
	}
	description := inProgressDescription(lifecycle.OpDeprovision)
	if len(users) > 0 {
		description = cond.Message
	}
	_, _, current := t.status()
	if was != nil && was.Message == cond.Message && current == description {
		return len(users), nil
	}
	err = a.patchStatus(ctx, t, func(s *status) {
		s.Description = description
		meta.SetStatusCondition(&s.Conditions, cond)
	})
	return len(users), err
}
