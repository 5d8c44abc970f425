package activities

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
func (a *Operations) registry(ctx context.Context, t *target) (*registry.Registry, *corev1.Secret, error) {
	store := registry.Store{Client: t.kube}
	key := t.registryKey()
	// A target that never applied anything has no registry yet: try to
	// create it straight away, and read it only if that fails.
	if !t.fresh() {
		reg, secret, err := store.Get(ctx, key)
		if !apierrors.IsNotFound(err) {
			return reg, secret, err
		}
	}
	reg := registry.New(key.Kind, t.readOnlyKeys())
	if t.binding != nil && t.instance != nil {
		instance := &target{Target: lifecycle.InstanceTarget(t.instance), instance: t.instance, plan: t.plan, service: t.service, kube: t.kube, remote: t.remote}
		inst, _, err := a.registry(ctx, instance)
		if err != nil {
			return nil, nil, err
		}
		reg.Inherit(inst)
	}
	stored, secret, err := store.Create(ctx, key, reg)
	if apierrors.IsAlreadyExists(err) && t.fresh() {
		t.applied = true // an earlier attempt created it: read it
		return a.registry(ctx, t)
	}
	return stored, secret, err
}
