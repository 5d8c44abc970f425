package apply

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Existing tells Objects which objects an earlier apply of the same owner
// wrote (the resource's status lists them). Any other object is most
// likely absent, so Objects creates it without reading it first: the
// create fails if the object exists after all, and only then is it read
// and applied as any other. A provision's objects are all new, and each
// read is a round trip that, on a busy API server, is a good part of the
// provision's time.
//
// The create is also the tighter fence: it lands only where nothing is,
// while a read that finds nothing leaves a window for another writer
// before the write (Fence).
func Existing(refs []Ref) Option {
	return func(o *options) {
		o.createFirst = true
		o.existing = refs
	}
}

// absent says whether obj is to be created without a read first.
func (o options) absent(obj *unstructured.Unstructured) bool {
	return o.createFirst && !slices.Contains(o.existing, RefOf(obj))
}

// create creates obj, as sent, and returns the API server's answer, or
// nil if it existed already.
func create(ctx context.Context, c client.Client, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	answer := obj.DeepCopy()
	err := c.Create(ctx, answer, client.FieldOwner(FieldManager))
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("applying %s %s: %w", obj.GetKind(), key(obj), err)
	}
	return answer, nil
}

// adopt hands the fields that a create gave the field manager's update
// entry to its apply entry, and returns the object's resourceVersion after
// that. A create records its fields as an update; without this, a field
// that a later apply no longer sends would stay, owned by that update,
// where an apply removes it. The patch is conditional on live's
// resourceVersion: a write in between makes it fail with a conflict.
//
// Only an object with such an entry is looked at further: csaupgrade
// decodes and encodes the apply entry's fields even when there is nothing
// to hand over, and every apply of an existing object passes here.
func adopt(ctx context.Context, c client.Client, live *metav1.PartialObjectMetadata) (string, error) {
	if !slices.ContainsFunc(live.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == ""
	}) {
		return live.GetResourceVersion(), nil
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return live.GetResourceVersion(), err
	}
	if err := c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return "", err
	}
	return live.GetResourceVersion(), nil
}
