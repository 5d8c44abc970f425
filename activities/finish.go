package activities

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// Finish writes the operation's final state and, when refs is not nil, what
// the templates applied. Success records the applied spec and generation; a
// removal that succeeded also deletes the registry and credentials and
// releases the finalizer, which lets the resource go.
func (a *Operations) Finish(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation, generation int64, o Outcome, refs []osbv1alpha1.Source) error {
	defer a.forget(ctx, tg)
	t, err := a.loadObjects(ctx, tg, op)
	if errors.Is(err, errGone) {
		return nil // deleted meanwhile: no status to write
	}
	if err != nil {
		return err
	}
	if op.Removes() && o.State == osbv1alpha1.StateSucceeded {
		return a.release(ctx, t)
	}
	if generation == 0 {
		generation = t.object().GetGeneration()
	}
	return a.patchStatus(ctx, t, func(s *status) {
		s.State = o.State
		s.Description = o.Description
		s.Error = o.Error
		if o.DashboardURL != "" {
			s.DashboardURL = o.DashboardURL
		}
		s.InstanceUsable = o.InstanceUsable
		s.UpdateRepeatable = o.UpdateRepeatable
		s.ObservedGeneration = generation
		if refs != nil {
			s.Resources = refs
		}
		if o.State == osbv1alpha1.StateSucceeded {
			s.recordApplied()
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type:               lifecycle.ConditionReady,
			Status:             map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[o.State == osbv1alpha1.StateSucceeded],
			Reason:             lifecycle.ReadyReason(op, o.State),
			Message:            o.Description,
			ObservedGeneration: generation,
		})
	})
}

// release deletes the registry and the credentials Secret and removes the
// finalizer.
func (a *Operations) release(ctx context.Context, t *target) error {
	names := []string{t.registryKey().SecretName()}
	finalizer := osbv1alpha1.InstanceFinalizer
	if t.binding != nil {
		names = append(names, credentialsName(t.binding))
		finalizer = osbv1alpha1.BindingFinalizer
	}
	for _, name := range names {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: name}}
		if err := t.kube.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s: %w", t.Namespace, name, err)
		}
	}
	obj := t.object()
	base := obj.DeepCopyObject().(client.Object)
	if !controllerutil.RemoveFinalizer(obj, finalizer) {
		return nil
	}
	err := a.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
