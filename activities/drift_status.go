package activities

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// emptyLike is a new object of obj's kind (an instance or binding), to
// read it anew into.
func emptyLike(obj ctrlclient.Object) ctrlclient.Object {
	if _, ok := obj.(*osbv1alpha1.SFServiceBinding); ok {
		return &osbv1alpha1.SFServiceBinding{}
	}
	return &osbv1alpha1.SFServiceInstance{}
}

// setCondition writes condition Drifted on obj (an instance or binding),
// unless an operation changed the status since obj was read: the next
// pass sees it anew.
func (d *Drift) setCondition(ctx context.Context, obj ctrlclient.Object, status metav1.ConditionStatus, reason, msg string) error {
	err := d.patchCondition(ctx, obj, status, reason, msg)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// recordOutcome writes a Repair run's outcome into condition Drifted.
// Unlike a check's write, which yields to any write it did not see, the
// outcome is the last word: a check that compared while the run applied
// may have written NoDrift in between, and the outcome (which names the
// run and what it repaired) would otherwise be lost. On a conflict it
// reads obj again and writes anew.
func (d *Drift) recordOutcome(ctx context.Context, obj ctrlclient.Object, status metav1.ConditionStatus, reason, msg string) error {
	cur := obj
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := d.patchCondition(ctx, cur, status, reason, msg)
		if apierrors.IsConflict(err) {
			fresh := emptyLike(obj)
			if err := d.Ops.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), fresh); err != nil {
				return err
			}
			cur = fresh
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil // gone: nothing to record on
	}
	return err
}

// patchCondition sets condition Drifted on obj, if obj is still the
// version it was read at.
func (d *Drift) patchCondition(ctx context.Context, obj ctrlclient.Object, status metav1.ConditionStatus, reason, msg string) error {
	base := obj.DeepCopyObject().(ctrlclient.Object)
	meta.SetStatusCondition(osbv1alpha1.ConditionsOf(obj), metav1.Condition{Type: osbv1alpha1.ConditionDrifted, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: obj.GetGeneration()})
	err := d.Ops.Client.Status().Patch(ctx, obj, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing condition %s: %w", osbv1alpha1.ConditionDrifted, err)
	}
	return err
}

func (d *Drift) event(obj ctrlclient.Object, kind, reason, msg string) {
	if d.Events != nil {
		d.Events.Event(obj, kind, reason, msg)
	}
}
