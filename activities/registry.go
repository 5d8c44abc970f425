package activities

import (
	"context"
	"fmt"
	"slices"

	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/registry"
)

// registryKey names the target's registry.
func (t *target) registryKey() registry.Key {
	if t.binding != nil {
		return registry.Key{Kind: registry.Binding, Namespace: t.Namespace, Name: t.binding.Name}
	}
	return registry.Key{Kind: registry.Instance, Namespace: t.Namespace, Name: t.instance.Name}
}

// fresh reports whether the target has never applied anything, so that its
// registry most likely does not exist yet.
func (t *target) fresh() bool {
	if t.applied {
		return false
	}
	if t.binding != nil {
		return t.binding.Status.AppliedSpec == nil && len(t.binding.Status.Resources) == 0
	}
	return t.instance.Status.AppliedSpec == nil && len(t.instance.Status.Resources) == 0
}

// readOnlyKeys are the registry keys Quartermaster sets for the target.
func (t *target) readOnlyKeys() map[string]string {
	keys := map[string]string{
		registry.KeyNamespace: t.Namespace,
		registry.KeyServiceID: t.plan.Spec.ServiceID,
		registry.KeyPlanID:    t.plan.Spec.ID,
	}
	if t.instance != nil {
		keys[registry.KeyInstanceID] = t.instance.OSBID()
	} else {
		keys[registry.KeyInstanceID] = t.binding.Spec.InstanceID
	}
	if t.binding != nil {
		keys[registry.KeyBindingID] = t.binding.Spec.ID
	}
	return keys
}

// registry returns the target's registry and its Secret, creating both on
// first use. A binding registry inherits the instance's keys when created.
//
// The Secret is owned by the instance or binding, so that one created for
// a resource already gone (by a worker that was stopped while it loaded the
// resource, and went on after its removal) is garbage-collected with all it
// owns. A new registry is checked against the resource straight after its
// creation, and one left by an earlier resource of the same name is
// replaced rather than used: the collector would remove it.
func (a *Operations) registry(ctx context.Context, t *target) (*registry.Registry, *corev1.Secret, error) {
	store := registry.Store{Client: t.kube}
	key := t.registryKey()
	owner, err := a.registryOwner(t)
	if err != nil {
		return nil, nil, err
	}
	// A target that never applied anything has no registry yet: try to
	// create it straight away, and read it only if that fails.
	if !t.fresh() {
		reg, secret, err := store.Get(ctx, key)
		switch {
		case err == nil && ownedByEarlier(secret, owner):
			if err := a.dropEarlier(ctx, t, secret); err != nil {
				return nil, nil, err
			}
		case !apierrors.IsNotFound(err):
			return reg, secret, err
		}
	}
	reg, err := a.newRegistry(ctx, t, a.registry)
	if err != nil {
		return nil, nil, err
	}
	stored, secret, err := a.createRegistry(ctx, t, reg)
	if apierrors.IsAlreadyExists(err) && t.fresh() {
		t.applied = true // an earlier attempt created it: read it
		return a.registry(ctx, t)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := a.stillThere(ctx, t, secret); err != nil {
		return nil, nil, err
	}
	return stored, secret, nil
}

// createRegistry creates the target's registry Secret holding reg (an
// AlreadyExists error is returned as it is). Its caller checks that the
// target is still the resource this run loaded (stillThere) before
// anything relies on it.
func (a *Operations) createRegistry(ctx context.Context, t *target, reg *registry.Registry) (*registry.Registry, *corev1.Secret, error) {
	owner, err := a.registryOwner(t)
	if err != nil {
		return nil, nil, err
	}
	return (registry.Store{Client: t.kube}).Create(ctx, t.registryKey(), reg, owner)
}

// readRegistry returns the target's registry as stored, and its Secret,
// and writes nothing: it is what an observation reads. A registry not
// created yet, or one an earlier resource of the name left, reads as the
// new one registry would create, with no Secret; setInRegistry creates it
// if the observation stores anything in it.
func (a *Operations) readRegistry(ctx context.Context, t *target) (*registry.Registry, *corev1.Secret, error) {
	if secret := t.registrySecret; secret != nil {
		// As this run's apply just wrote it: the observation that follows
		// needs no read of its own. Once only: a later poll, or a retry
		// after a write that met someone else's, reads it again.
		t.registrySecret = nil
		a.remember(ctx, t)
		if reg, err := registry.Decode(t.registryKey().Kind, secret.Data); err == nil {
			return reg, secret, nil
		}
	}
	owner, err := a.registryOwner(t)
	if err != nil {
		return nil, nil, err
	}
	reg, secret, err := (registry.Store{Client: t.kube}).Get(ctx, t.registryKey())
	switch {
	case err == nil && !ownedByEarlier(secret, owner):
		return reg, secret, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, nil, err
	}
	reg, err = a.newRegistry(ctx, t, a.readRegistry)
	return reg, nil, err
}

// newRegistry is the target's registry as it is first created: the keys
// Quartermaster sets, and for a binding its instance's, which instance
// gets (registry, creating it if need be; or readRegistry).
func (a *Operations) newRegistry(ctx context.Context, t *target,
	instance func(context.Context, *target) (*registry.Registry, *corev1.Secret, error)) (*registry.Registry, error) {
	reg := registry.New(t.registryKey().Kind, t.readOnlyKeys())
	if t.binding != nil && t.instance != nil {
		inst, _, err := instance(ctx, t.instanceTarget())
		if err != nil {
			return nil, err
		}
		reg.Inherit(inst)
	}
	return reg, nil
}

// setInRegistry stores value under key in the target's registry: in reg,
// as read with secret; or, where the observation found no registry (no
// secret), in the one registry creates now or finds created meanwhile, so
// that nothing another step stored is written over.
func (a *Operations) setInRegistry(ctx context.Context, t *target, reg *registry.Registry, secret *corev1.Secret, key string, value any) error {
	if secret == nil {
		var err error
		if reg, secret, err = a.registry(ctx, t); err != nil {
			return err
		}
	}
	if err := reg.Set(key, value); err != nil {
		return err
	}
	return (registry.Store{Client: t.kube}).Save(ctx, secret, reg)
}

// instanceTarget is the instance of a binding's target, for its registry.
func (t *target) instanceTarget() *target {
	return &target{Target: lifecycle.InstanceTarget(t.instance), instance: t.instance, plan: t.plan, service: t.service, kube: t.kube, remote: t.remote}
}

// registryOwner is the owner reference of the target's registry: the
// instance or binding. A registry in another cluster has none, as an owner
// must be in the same cluster.
func (a *Operations) registryOwner(t *target) (*metav1.OwnerReference, error) {
	if t.remote {
		return nil, nil
	}
	obj := t.object()
	gvk, err := apiutil.GVKForObject(obj, a.Client.Scheme())
	if err != nil {
		return nil, fmt.Errorf("the owner of %s %s/%s's registry: %w", t.Kind, t.Namespace, t.Name, err)
	}
	return &metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: obj.GetName(), UID: obj.GetUID()}, nil
}

// ownedByEarlier reports whether secret belongs to an earlier resource of
// owner's kind and name: one with another UID. A registry of a release that
// set no owner belongs to the resource of its name.
func ownedByEarlier(secret *corev1.Secret, owner *metav1.OwnerReference) bool {
	if owner == nil {
		return false
	}
	kind := schema.FromAPIVersionAndKind(owner.APIVersion, owner.Kind).GroupKind()
	return slices.ContainsFunc(secret.OwnerReferences, func(r metav1.OwnerReference) bool {
		return schema.FromAPIVersionAndKind(r.APIVersion, r.Kind).GroupKind() == kind && r.UID != owner.UID
	})
}

// dropEarlier deletes the registry of an earlier resource of the target's
// name, and not one created since.
func (a *Operations) dropEarlier(ctx context.Context, t *target, secret *corev1.Secret) error {
	if err := (registry.Store{Client: t.kube}).Delete(ctx, secret); err != nil {
		return fmt.Errorf("replacing the registry of an earlier %s: %w", t.Kind, err)
	}
	if activity.IsActivity(ctx) {
		activity.GetLogger(ctx).Info("a registry left by an earlier resource of the same name was replaced",
			"kind", string(t.Kind), "namespace", t.Namespace, "name", t.Name)
	}
	return nil
}

// stillThere checks, after its registry was created, that the target is
// still the resource this run loaded. A worker stopped after loading it
// may go on after the removal; its registry, and all it would render into
// it, must not outlive the resource. The registry just created is deleted
// again. A read that fails leaves it: the owner reference still ties it to
// the resource, and another worker may already be using it.
func (a *Operations) stillThere(ctx context.Context, t *target, secret *corev1.Secret) error {
	loaded := t.object()
	live := loaded.DeepCopyObject().(client.Object)
	err := a.Client.Get(ctx, client.ObjectKeyFromObject(loaded), live)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s %s/%s after creating its registry: %w", t.Kind, t.Namespace, t.Name, err)
	}
	if err == nil && live.GetUID() == loaded.GetUID() {
		return nil
	}
	if err := (registry.Store{Client: t.kube}).Delete(ctx, secret); err != nil {
		return fmt.Errorf("the registry of %s %s/%s, which is gone: %w", t.Kind, t.Namespace, t.Name, err)
	}
	return gone(apierrors.NewNotFound(schema.GroupResource{}, t.Name), t.Target)
}
