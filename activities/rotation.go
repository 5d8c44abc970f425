package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/rotation"
)

// rotates reports whether the target is a binding that rotates another
// and is not being unbound.
func (t *target) rotates() bool {
	return t.binding != nil && t.binding.Spec.PredecessorBinding != "" && t.binding.DeletionTimestamp == nil
}

// readPredecessor reads the binding the target rotates from the API server
// (nil: it does not exist).
func (a *Operations) readPredecessor(ctx context.Context, t *target) (*osbv1alpha1.SFServiceBinding, error) {
	var pred osbv1alpha1.SFServiceBinding
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: t.binding.Namespace, Name: t.binding.Spec.PredecessorBinding}, &pred)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading predecessor binding %s: %w", t.binding.Spec.PredecessorBinding, err)
	}
	return &pred, nil
}

// checkRotation fails a bind whose rotation the rules do not allow, once,
// before anything is applied.
func (a *Operations) checkRotation(ctx context.Context, t *target) error {
	pred, err := a.readPredecessor(ctx, t)
	if err != nil {
		return err
	}
	err = rotation.Check(t.plan, t.binding, pred)
	var refusal *rotation.Refusal
	if errors.As(err, &refusal) {
		return temporal.NewNonRetryableApplicationError(refusal.Error(), ErrRotation, nil)
	}
	return err
}

// predecessor is what a rotation's templates see of the binding it
// replaces: the binding, its registry and its credentials' keys. It is nil
// once the predecessor is gone: what the plan keeps of it is in the new
// binding's registry by then.
func (a *Operations) predecessor(ctx context.Context, t *target) (*plan.Predecessor, error) {
	pred, err := a.readPredecessor(ctx, t)
	if pred == nil || err != nil {
		return nil, err
	}
	p := &plan.Predecessor{Binding: pred}
	reg, _, err := (registry.Store{Client: t.kube}).Get(ctx, registry.Key{Kind: registry.Binding, Namespace: pred.Namespace, Name: pred.Name})
	switch {
	case err == nil:
		p.Registry = reg
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the registry of predecessor binding %s: %w", pred.Name, err)
	}
	if name := pred.Status.Response.SecretRef; name != "" {
		var secret corev1.Secret
		err := t.kube.Get(ctx, client.ObjectKey{Namespace: pred.Namespace, Name: name}, &secret)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the credentials of predecessor binding %s: %w", pred.Name, err)
		}
		for k := range secret.Data {
			p.CredentialKeys = append(p.CredentialKeys, k)
		}
	}
	return p, nil
}
