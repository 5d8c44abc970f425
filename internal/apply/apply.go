// Package apply writes rendered objects to Kubernetes with server-side apply
// under one field manager, makes the registry Secret their owner, and
// removes them again. Every function is idempotent, so an activity that runs
// it can be retried at any point.
package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything
// Quartermaster applies.
const FieldManager = "quartermaster"

// SingletonAnnotation marks a rendered object that several instances share:
// the first apply creates it, later ones only add their owner reference, and
// it is deleted when its last owner lets go of it.
const SingletonAnnotation = "quartermaster.io/singleton"

// Owner is the registry Secret that owns what an instance or binding creates.
type Owner struct {
	Name      string
	Namespace string
	UID       types.UID
}

func (o Owner) reference() metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: o.Name, UID: o.UID}
}

// Ref names an applied object.
type Ref = osbv1alpha1.Source

// RefOf returns the Ref of an object.
func RefOf(obj client.Object) Ref {
	gvk := obj.GetObjectKind().GroupVersionKind()
	return Ref{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: obj.GetName(), Namespace: obj.GetNamespace()}
}

// Objects applies objs. A namespaced object without a namespace goes to
// defaultNamespace. An object in the owner's namespace gets an owner
// reference to it, so deleting the registry garbage-collects it; a
// cluster-scoped or cross-namespace object cannot be owned and is only
// listed in the returned refs, from which Delete removes it.
//
// Each write is fenced: nothing rendered at fence lands on an object that a
// newer generation's apply wrote (Fence). Afterwards each of objs is what
// was sent for it (its namespace, owner and stamp set), except a
// singleton's, which is the live object it found or made.
//
// The objects go in the template's order, but not one at a time: the
// objects between two of the kinds that the API server's admission of
// others depends on (ordered: a Namespace, a CustomResourceDefinition, a
// ServiceAccount, a LimitRange...) go at once. A provision's time is mostly
// round trips to the API server, and on a busy one each takes a while.
// Each object's own read and write stay in order, so each is fenced as
// before. A failed wave ends the apply; the failure returned is the first
// in the template's order, with the refs of the objects before it (others
// of its wave may be applied too, as a retry applies them anyway).
func Objects(ctx context.Context, c client.Client, owner Owner, fence Fence, defaultNamespace string, objs []*unstructured.Unstructured, opts ...Option) ([]Ref, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ready := o.ready()
	errs, answers := make([]error, len(objs)), make([]*unstructured.Unstructured, len(objs))
	for _, wave := range waves(objs) {
		// A wave's kinds are looked up as it comes: a custom resource's
		// kind is known once the wave of its definition is applied.
		if err := place(c, objs, wave, defaultNamespace); err != nil {
			errs[wave[0]] = err
			break
		}
		var g errgroup.Group
		g.SetLimit(applyConcurrency)
		for _, i := range wave {
			g.Go(func() error {
				obj := objs[i]
				owned := obj.GetNamespace() != "" && obj.GetNamespace() == owner.Namespace
				if obj.GetAnnotations()[SingletonAnnotation] == "true" {
					if errs[i] = singleton(ctx, c, owner, owned, obj, ready); errs[i] == nil {
						answers[i] = obj
					}
				} else {
					answers[i], errs[i] = applyOne(ctx, c, owner, fence, owned, obj, ready, o.absent(obj))
				}
				return nil
			})
		}
		_ = g.Wait()
		if slices.ContainsFunc(wave, func(i int) bool { return errs[i] != nil }) {
			break // what follows may depend on what failed
		}
	}
	if len(objs) == 0 {
		// Nothing to write: the check still says whether that is so.
		if err := ready(); err != nil {
			return nil, err
		}
	}
	if o.answers != nil {
		*o.answers = answers
	}
	refs := make([]Ref, 0, len(objs))
	for i, obj := range objs {
		if errs[i] != nil {
			return refs, errs[i]
		}
		refs = append(refs, RefOf(obj))
	}
	return refs, nil
}

// fencedTries bounds how often an apply reads an object again after a
// concurrent write made its precondition fail.
const fencedTries = 5

// applyOne applies obj, fenced, and returns the API server's answer. One
// that is absent (Existing) is created without a read; if it exists after
// all, it is read and applied as any other.
func applyOne(ctx context.Context, c client.Client, owner Owner, fence Fence, owned bool, obj *unstructured.Unstructured, ready func() error, absent bool) (*unstructured.Unstructured, error) {
	if owned {
		ref := owner.reference()
		ref.Controller = ptr.To(true)
		obj.SetOwnerReferences([]metav1.OwnerReference{ref})
	}
	obj.SetManagedFields(nil)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[RenderedAnnotation] = fence.stamp(owner.UID)
	obj.SetAnnotations(annotations)
	if absent {
		if err := ready(); err != nil {
			return nil, err
		}
		if answer, err := create(ctx, c, obj); err != nil || answer != nil {
			return answer, err
		}
	}
	for try := 1; ; try++ {
		live, err := readFence(ctx, c, owner, fence, obj)
		if err != nil {
			return nil, err
		}
		if err := ready(); err != nil {
			return nil, err
		}
		version := ""
		if live != nil {
			version, err = adopt(ctx, c, live)
			if apierrors.IsConflict(err) && try < fencedTries {
				continue // written since the read: read its stamp again
			}
			if err != nil {
				return nil, fmt.Errorf("taking over the fields of %s %s from its create: %w", obj.GetKind(), key(obj), err)
			}
		}
		obj.SetResourceVersion(version)
		// A copy takes the answer: obj stays what was sent, which the
		// drift checks record (internal/drift).
		answer := obj.DeepCopy()
		err = c.Patch(ctx, answer, client.Apply, client.FieldOwner(FieldManager), client.ForceOwnership)
		if apierrors.IsConflict(err) && live != nil && try < fencedTries {
			continue // written since the read: read its stamp again
		}
		if err != nil {
			return nil, fmt.Errorf("applying %s %s: %w", obj.GetKind(), key(obj), err)
		}
		return answer, nil
	}
}

// readFence reads obj's live metadata, whose resourceVersion the write
// sends as its precondition (nil if it does not exist), or returns
// Superseded or NotOurs.
func readFence(ctx context.Context, c client.Client, owner Owner, fence Fence, obj *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s before applying it: %w", obj.GetKind(), key(obj), err)
	}
	if !Ours(live, owner) {
		return nil, &NotOurs{Object: obj.GetKind() + " " + key(obj)}
	}
	if stamp := live.GetAnnotations()[RenderedAnnotation]; fence.overtakenBy(stamp, owner.UID) {
		applied := stampFence(stamp)
		return nil, &Superseded{Object: obj.GetKind() + " " + key(obj), Applied: applied, Rendered: fence}
	}
	return live, nil
}

// singleton creates obj if it does not exist, and otherwise adds the
// owner's reference to the existing one without touching its content.
func singleton(ctx context.Context, c client.Client, owner Owner, owned bool, obj *unstructured.Unstructured, ready func() error) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), live)
	if apierrors.IsNotFound(err) {
		if owned {
			obj.SetOwnerReferences([]metav1.OwnerReference{owner.reference()})
		}
		annotations := obj.GetAnnotations()
		annotations[RenderedAnnotation] = Fence{}.stamp(owner.UID)
		obj.SetAnnotations(annotations)
		if err := ready(); err != nil {
			return err
		}
		err = c.Create(ctx, obj, client.FieldOwner(FieldManager))
		if apierrors.IsAlreadyExists(err) {
			return singleton(ctx, c, owner, owned, obj, ready)
		}
		if err != nil {
			return fmt.Errorf("creating singleton %s %s: %w", obj.GetKind(), key(obj), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading singleton %s %s: %w", obj.GetKind(), key(obj), err)
	}
	obj.Object = live.Object
	if !owned || slices.ContainsFunc(live.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.UID }) {
		return nil
	}
	if err := ready(); err != nil {
		return err
	}
	// A JSON patch with a test on resourceVersion appends without losing a
	// concurrent owner's reference; a conflict fails the activity, which retries.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
		{"op": "add", "path": "/metadata/ownerReferences", "value": append(live.GetOwnerReferences(), owner.reference())},
	})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("adding an owner to singleton %s %s: %w", obj.GetKind(), key(obj), err)
	}
	return nil
}

// Delete removes what an instance or binding applied. An object shared as a
// singleton loses the owner's reference and is deleted only when no owner is
// left. Objects already gone are skipped. Deletion is in the foreground: an
// object stays, marked deleted, until the garbage collector has removed what
// it owns, so "the Deployment is gone" means its pods are gone too.
//
// An object that is not the owner's (Ours) is left as it is and returned:
// refs come from the status of the instance or binding, which whoever may
// write it could point at anything.
func Delete(ctx context.Context, c client.Client, owner Owner, refs []Ref) (left []Ref, err error) {
	return deleteFenced(ctx, c, owner, Fence{}, refs)
}

// deleteFenced is Delete for an apply that rendered fence: an object that a
// newer generation wrote is not deleted (Superseded), nor one written since
// it was read (the resourceVersion precondition).
func deleteFenced(ctx context.Context, c client.Client, owner Owner, fence Fence, refs []Ref) (left []Ref, err error) {
	for _, ref := range refs {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(ref.APIVersion)
		obj.SetKind(ref.Kind)
		err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue
		}
		if apierrors.IsForbidden(err) {
			// One the deleter may not even read (a tenant's plan, of
			// another namespace) is no object its applies made.
			left = append(left, ref)
			continue
		}
		if err != nil {
			return left, fmt.Errorf("reading %s %s: %w", ref.Kind, key(obj), err)
		}
		if !Ours(obj, owner) {
			left = append(left, ref)
			continue
		}
		if obj.GetAnnotations()[SingletonAnnotation] == "true" {
			rest := slices.DeleteFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
			if len(rest) > 0 {
				patch, err := json.Marshal([]map[string]any{
					{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
					{"op": "replace", "path": "/metadata/ownerReferences", "value": rest},
				})
				if err != nil {
					return left, err
				}
				if err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
					return left, fmt.Errorf("removing an owner from singleton %s %s: %w", ref.Kind, key(obj), err)
				}
				continue
			}
		}
		opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationForeground)}
		if fence != (Fence{}) {
			if stamp := obj.GetAnnotations()[RenderedAnnotation]; fence.overtakenBy(stamp, owner.UID) {
				return left, &Superseded{Object: ref.Kind + " " + key(obj), Applied: stampFence(stamp), Rendered: fence}
			}
			opts = append(opts, client.Preconditions{ResourceVersion: ptr.To(obj.GetResourceVersion())})
		}
		err = c.Delete(ctx, obj, opts...)
		if err != nil && !apierrors.IsNotFound(err) {
			return left, fmt.Errorf("deleting %s %s: %w", ref.Kind, key(obj), err)
		}
	}
	return left, nil
}

// Prune deletes the objects of previous that current no longer lists: what
// an update that rendered fence stopped rendering. Like Delete, it leaves
// and returns those that are not the owner's.
func Prune(ctx context.Context, c client.Client, owner Owner, fence Fence, previous, current []Ref) (left []Ref, err error) {
	var gone []Ref
	for _, p := range previous {
		if !slices.Contains(current, p) {
			gone = append(gone, p)
		}
	}
	return deleteFenced(ctx, c, owner, fence, gone)
}

func key(obj client.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}
