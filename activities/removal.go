package activities

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
// the owner that its registry Secret is. What is listed but not the
// owner's is left, and reported (reportLeft).
func (a *Operations) deleteApplied(ctx context.Context, t *target, refs []apply.Ref) error {
	owner, err := a.owner(ctx, t)
	if err != nil {
		return err
	}
	left, err := apply.Delete(ctx, t.applier, owner, refs)
	a.reportLeft(t, left)
	return err
}

// owner is the target's registry Secret as the owner of what it applied;
// without the Secret, an owner of no UID, whom no object is stamped for.
func (a *Operations) owner(ctx context.Context, t *target) (apply.Owner, error) {
	_, secret, err := registry.Store{Client: t.kube}.Get(ctx, t.registryKey())
	owner := apply.Owner{Name: t.registryKey().SecretName(), Namespace: t.Namespace}
	switch {
	case err == nil:
		owner.UID = secret.UID
	case !apierrors.IsNotFound(err):
		return owner, err
	}
	return owner, nil
}

// ReasonNotOurs is the reason of the Warning Event on an instance or
// binding whose status lists an object that its applies did not make.
const ReasonNotOurs = "LeftNotOurs"

// reportLeft tells, on the target, of each object its status listed that
// a removal or prune left because the target's applies did not make it.
func (a *Operations) reportLeft(t *target, left []apply.Ref) {
	if a.Events == nil {
		return
	}
	for _, ref := range left {
		name := ref.Name
		if ref.Namespace != "" {
			name = ref.Namespace + "/" + name
		}
		a.Events.Eventf(t.object(), corev1.EventTypeWarning, ReasonNotOurs,
			"%s %s is listed in the status but was not made by Quartermaster for this %s: left as it is", ref.Kind, name, t.Kind)
	}
}

// removalOutcome is the outcome of a removal whose plan has no status
// template: succeeded once every object it applied is gone. For each
// object in turn it reads, decides (apply.Remaining, pure) and writes
// what that calls for: a delete again, of an object a stale apply wrote
// after its deletion.
func (a *Operations) removalOutcome(ctx context.Context, t *target) (Outcome, error) {
	owner, err := a.owner(ctx, t)
	if err != nil {
		return Outcome{}, err
	}
	for _, ref := range t.resources() {
		obj, err := a.readLeftover(ctx, t, ref)
		if err != nil {
			return Outcome{}, err
		}
		if obj != nil && !apply.Ours(obj, owner) {
			continue // not the target's: left, and reported when it was
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
	err := t.applier.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case apierrors.IsForbidden(err):
		return nil, nil // not the target's to read, so none its applies made (deleteApplied left it)
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	return obj, nil
}
