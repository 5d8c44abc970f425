package activities

import (
	"context"
	"fmt"

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
// template: succeeded once every object it applied is gone. For each
// object in turn it reads, decides (apply.Remaining, pure) and writes
// what that calls for: a delete again, of an object a stale apply wrote
// after its deletion.
func (a *Operations) removalOutcome(ctx context.Context, t *target) (Outcome, error) {
	for _, ref := range t.resources() {
		obj, err := a.readLeftover(ctx, t, ref)
		if err != nil {
			return Outcome{}, err
		}
		remains := apply.Remaining(obj, t.registryKey().SecretName())
		if !remains.Waiting {
			continue
		}
		if remains.DeleteAgain {
			if err := a.deleteApplied(ctx, t, []apply.Ref{ref}); err != nil {
				return Outcome{}, err
			}
		}
		return Outcome{State: osbv1alpha1.StateInProgress, Description: remains.Description}, nil
	}
	return Outcome{State: osbv1alpha1.StateSucceeded}, nil
}

// readLeftover reads an object the removal deleted: nil once it is gone,
// or its kind is no longer served.
func (a *Operations) readLeftover(ctx context.Context, t *target, ref apply.Ref) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(ref.APIVersion)
	obj.SetKind(ref.Kind)
	err := t.kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	return obj, nil
}
