package registry

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/kubenames"
)

// SecretType is the type of registry Secrets, so that they are easy to tell
// apart from the Secrets they sit beside.
const SecretType corev1.SecretType = "quartermaster.io/registry"

// Label marks registry Secrets, with their kind as its value: caches of
// Secrets that are not the registry's leave them out by it.
const Label = "quartermaster.io/registry"

// Key names the registry of one instance or binding: its kind, and the
// namespace and name of the resource.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

// SecretName is the name of the registry's Secret: qm-instance-<name> or
// qm-binding-<name>.
func (k Key) SecretName() string { return kubenames.Bounded("qm-"+string(k.Kind)+"-", k.Name) }

// Store keeps registries in Secrets.
type Store struct {
	Client client.Client
}

// Get reads a registry and its Secret. A registry that does not exist is
// the API server's NotFound.
func (s Store) Get(ctx context.Context, key Key) (*Registry, *corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.SecretName()}, secret); err != nil {
		return nil, nil, err
	}
	reg, err := Decode(key.Kind, secret.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return reg, secret, nil
}

// Create stores a new registry and returns it as stored. An existing one is
// the API server's AlreadyExists: a retry reads it with Get instead. The
// Secret is owned by owner unless it is nil, so that the garbage collector
// removes a registry whose resource is gone, and with it all it owns.
func (s Store) Create(ctx context.Context, key Key, reg *Registry, owner *metav1.OwnerReference) (*Registry, *corev1.Secret, error) {
	data, err := reg.Encode()
	if err != nil {
		return nil, nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      key.SecretName(),
			Namespace: key.Namespace,
			Labels:    map[string]string{Label: string(key.Kind)},
		},
		Type: SecretType,
		Data: data,
	}
	kubenames.SetLabel(secret, "quartermaster.io/"+string(key.Kind), key.Name)
	if owner != nil {
		secret.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := s.Client.Create(ctx, secret); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("creating registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	stored, err := Decode(key.Kind, data) // nothing left to save
	return stored, secret, err
}

// Delete deletes the registry Secret secret, if it is still that one (its
// UID): one already gone, or made again since, is left as it is.
func (s Store) Delete(ctx context.Context, secret *corev1.Secret) error {
	err := s.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// Save writes what templates stored in reg since it was read.
func (s Store) Save(ctx context.Context, secret *corev1.Secret, reg *Registry) error {
	if !reg.Changed() {
		return nil
	}
	data, err := reg.Encode()
	if err != nil {
		return err
	}
	secret.Data = data
	if err := s.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("saving registry Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}
