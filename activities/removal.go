package activities

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/registry"
)

// RemoveResources deletes what the target's templates applied: the first
// step of deprovision and the second of unbind.
func (a *Operations) RemoveResources(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) error {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return err
	}
	return a.deleteApplied(ctx, t, t.resources())
}

// deleteApplied deletes refs, objects the target's templates applied, as
// the owner that its registry Secret is.
func (a *Operations) deleteApplied(ctx context.Context, t *target, refs []apply.Ref) error {
	_, secret, err := registry.Store{Client: t.kube}.Get(ctx, t.registryKey())
	owner := apply.Owner{Name: t.registryKey().SecretName(), Namespace: t.Namespace}
	switch {
	case err == nil:
		owner.UID = secret.UID
	case !apierrors.IsNotFound(err):
		return err
	}
	return apply.Delete(ctx, t.kube, owner, refs)
}

// removalOutcome is the outcome of a removal whose plan has no status
// template: succeeded once every object it applied is gone.
func (a *Operations) removalOutcome(ctx context.Context, t *target) (Outcome, error) {
	for _, ref := range t.resources() {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(ref.APIVersion)
		obj.SetKind(ref.Kind)
		err := t.kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || err == nil && a.released(t, obj) {
			continue
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
		}
		description := fmt.Sprintf("waiting for %s %s to go", ref.Kind, ref.Name)
		if obj.GetDeletionTimestamp() == nil {
			// It was deleted, and written again since: by an apply of a
			// worker that hung in the middle of it and then went on, its
			// run long taken over by another worker. Delete it again.
			if err := a.deleteApplied(ctx, t, []apply.Ref{ref}); err != nil {
				return Outcome{}, err
			}
		} else if f := obj.GetFinalizers(); len(f) > 0 {
			description += " (held by " + strings.Join(f, ", ") + ")"
		}
		return Outcome{State: osbv1alpha1.StateInProgress, Description: description}, nil
	}
	return Outcome{State: osbv1alpha1.StateSucceeded}, nil
}

// released says whether obj is a singleton that other instances still
// share and that no longer lists the target among its owners: it stays,
// and the target is done with it.
func (a *Operations) released(t *target, obj *unstructured.Unstructured) bool {
	if obj.GetAnnotations()[apply.SingletonAnnotation] != "true" {
		return false
	}
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == "Secret" && ref.Name == t.registryKey().SecretName() {
			return false
		}
	}
	return true
}
