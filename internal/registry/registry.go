// Package registry implements the registries of the Couchbase service
// broker: a typed key/value store per service instance and per binding,
// kept in a Secret beside it (Store). Values are stored as JSON so that
// their type survives. Templates read and write them through the registry's
// functions, so that generated passwords, keys and certificates are made
// once. The registry Secret also owns every object its instance or binding
// applies, so that deleting it garbage-collects them.
package registry

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind says whose registry it is.
type Kind string

const (
	Instance Kind = "instance"
	Binding  Kind = "binding"
)

// Keys with a meaning to Quartermaster.
const (
	KeyNamespace       = "namespace"
	KeyInstanceID      = "instance-id"
	KeyBindingID       = "binding-id"
	KeyServiceID       = "service-id"
	KeyPlanID          = "plan-id"
	KeyDashboardURL    = "dashboard-url"
	KeyCredentials     = "credentials"
	KeyContext         = "context"
	KeyParameters      = "parameters"
	KeyOperation       = "operation"
	KeyOperationID     = "operation-id"
	KeyOperationStatus = "operation-status"
)

// Access is what a template may do with a key.
type Access int

const (
	// User keys are defined by plan authors.
	User Access = iota
	// ReadOnly keys are set by Quartermaster and readable by templates.
	ReadOnly
	// ReadWrite keys are set by templates and read by Quartermaster.
	ReadWrite
	// Reserved keys are Quartermaster's alone: templates can neither read nor write them.
	Reserved
)

var access = map[string]Access{
	KeyNamespace:       ReadOnly,
	KeyInstanceID:      ReadOnly,
	KeyBindingID:       ReadOnly,
	KeyServiceID:       ReadOnly,
	KeyPlanID:          ReadOnly,
	KeyDashboardURL:    ReadWrite,
	KeyCredentials:     ReadWrite,
	KeyContext:         Reserved,
	KeyParameters:      Reserved,
	KeyOperation:       Reserved,
	KeyOperationID:     Reserved,
	KeyOperationStatus: Reserved,
}

// AccessOf returns how templates may use key.
func AccessOf(key string) Access {
	return access[key]
}

// Registry is the decoded content of one registry Secret.
type Registry struct {
	kind    Kind
	values  map[string]any
	changed bool
}

// New returns an empty registry of kind with its read-only keys set.
func New(kind Kind, readOnly map[string]string) *Registry {
	r := &Registry{kind: kind, values: map[string]any{}}
	for k, v := range readOnly {
		r.values[k] = v
	}
	r.changed = true
	return r
}

// Decode reads a registry from its Secret's data.
func Decode(kind Kind, data map[string][]byte) (*Registry, error) {
	r := &Registry{kind: kind, values: make(map[string]any, len(data))}
	for k, raw := range data {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("registry key %q does not hold JSON: %w", k, err)
		}
		r.values[k] = v
	}
	return r, nil
}

// Encode returns the Secret data of the registry.
func (r *Registry) Encode() (map[string][]byte, error) {
	data := make(map[string][]byte, len(r.values))
	for k, v := range r.values {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("registry key %q: %w", k, err)
		}
		data[k] = raw
	}
	return data, nil
}

// Adopt takes the values of data, the encoding of this registry after a
// render elsewhere (a render process) set values in it.
func (r *Registry) Adopt(data map[string][]byte) error {
	other, err := Decode(r.kind, data)
	if err != nil {
		return err
	}
	r.values, r.changed = other.values, true
	return nil
}

// Kind says whose registry this is.
func (r *Registry) Kind() Kind { return r.kind }

// Changed reports whether a value was set since the registry was decoded.
func (r *Registry) Changed() bool { return r.changed }

// Inherit copies every value of the instance registry that the binding does
// not define itself. It is done once, when the binding registry is created:
// a later instance update does not reach the binding, as in the Couchbase
// broker.
func (r *Registry) Inherit(instance *Registry) {
	for k, v := range instance.values {
		if _, ok := r.values[k]; !ok && AccessOf(k) != Reserved {
			r.values[k] = v
			r.changed = true
		}
	}
}

// Get returns the value of a key for a template.
func (r *Registry) Get(key string) (any, error) {
	if AccessOf(key) == Reserved {
		return nil, fmt.Errorf("registry key %q is reserved: templates cannot read it", key)
	}
	return r.values[key], nil
}

// Set stores a value for a template.
func (r *Registry) Set(key string, value any) error {
	switch AccessOf(key) {
	case ReadOnly:
		return fmt.Errorf("registry key %q is read-only: it is set by Quartermaster", key)
	case Reserved:
		return fmt.Errorf("registry key %q is reserved: templates cannot write it", key)
	}
	if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
		return fmt.Errorf("registry key %q is not a valid Secret key: %s", key, errs[0])
	}
	r.values[key] = value
	r.changed = true
	return nil
}

// Values returns what templates see as .registry: every key but the reserved ones.
func (r *Registry) Values() map[string]any {
	out := make(map[string]any, len(r.values))
	for k, v := range r.values {
		if AccessOf(k) != Reserved {
			out[k] = v
		}
	}
	return out
}
