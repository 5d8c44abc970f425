// Package serviceclass makes a RegisteredService of a resource, as a
// Primaza ServiceClass says: the class's identity, constraints and health
// check, and an endpoint definition taken from the resource's fields
// (JSONPath) and from Secrets it links to. Values marked secret go to a
// Secret of their own that the RegisteredService refers to, never into the
// RegisteredService in clear. It is pure: the Secrets a resource links to
// are read through a function the caller gives.
package serviceclass

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/jsonpath"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/kubenames"
)

// Registration is what one resource of a class registers: the
// RegisteredService's spec, and the values of the Secret that spec refers
// to (empty: nothing is secret).
type Registration struct {
	Name   string
	Spec   primazav1alpha1.RegisteredServiceSpec
	Secret map[string][]byte
}

// SecretKeys says whether the Secret name in the resource's namespace has
// key: nil when it has, otherwise why not (it does not exist, the key is
// missing).
type SecretKeys func(name, key string) error

// Name is the name of the RegisteredService of a resource of kind named
// name, and of its Secret: the kind, lowercase, and the name.
func Name(kind, name string) string {
	return kubenames.Bounded(strings.ToLower(kind)+"-", name)
}

// Selector is the class's fieldSelector as a test of a resource: every
// resource when it has none. A field a resource lacks is empty, so that
// status.state!=failed holds for a resource without a state.
func Selector(class *primazav1alpha1.ServiceClass) (func(*unstructured.Unstructured) bool, error) {
	text := class.Spec.Resource.FieldSelector
	if text == "" {
		return func(*unstructured.Unstructured) bool { return true }, nil
	}
	sel, err := fields.ParseSelector(text)
	if err != nil {
		return nil, fmt.Errorf("fieldSelector %q does not parse: %w", text, err)
	}
	requirements := sel.Requirements()
	return func(resource *unstructured.Unstructured) bool {
		set := fields.Set{}
		for _, r := range requirements {
			value, err := Eval(resource, "."+r.Field)
			if err != nil {
				value = ""
			}
			set[r.Field] = value
		}
		return sel.Matches(set)
	}, nil
}

// Register makes the registration of resource by class. A mapping that
// does not resolve (a field the resource does not have, a Secret or key
// that is missing) is an error naming the mapping.
func Register(class *primazav1alpha1.ServiceClass, resource *unstructured.Unstructured, secrets SecretKeys) (Registration, error) {
	name := Name(resource.GetKind(), resource.GetName())
	r := Registration{Name: name, Spec: primazav1alpha1.RegisteredServiceSpec{
		ServiceClassIdentity: slices.Clone(class.Spec.ServiceClassIdentity),
		Constraints:          class.Spec.Constraints.DeepCopy(),
	}}
	if hc := class.Spec.HealthCheck; hc != nil {
		// The API server's defaults spelled out, so that a service as
		// stored equals one made again, and a reconcile writes nothing.
		r.Spec.HealthCheck = &primazav1alpha1.HealthCheck{Container: &primazav1alpha1.HealthCheckContainer{
			Image: hc.Container.Image, Command: []string{"sh", "-c", hc.Container.Command}, EndpointEnv: true,
			Minutes: 5, TimeoutSeconds: 60,
		}, FailureThreshold: 1, SuccessThreshold: 1}
	}
	mappings := class.Spec.Resource.ServiceEndpointDefinitionMappings
	for _, field := range mappings.ResourceFields {
		value, err := Eval(resource, field.JSONPath)
		if err != nil {
			return Registration{}, fmt.Errorf("%s %s: %s: %w", resource.GetKind(), resource.GetName(), field.Name, err)
		}
		if field.Secret == nil || *field.Secret {
			if r.Secret == nil {
				r.Secret = map[string][]byte{}
			}
			r.Secret[field.Name] = []byte(value)
			r.Spec.ServiceEndpointDefinition = append(r.Spec.ServiceEndpointDefinition, primazav1alpha1.ServiceEndpointDefinitionItem{
				Name: field.Name, ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: name, Key: field.Name}})
			continue
		}
		r.Spec.ServiceEndpointDefinition = append(r.Spec.ServiceEndpointDefinition, primazav1alpha1.ServiceEndpointDefinitionItem{
			Name: field.Name, Value: &value})
	}
	for _, field := range mappings.SecretRefFields {
		secretName, err := resolve(resource, field.SecretName)
		if err == nil {
			var key string
			if key, err = resolve(resource, field.SecretKey); err == nil {
				if err = secrets(secretName, key); err == nil {
					// A reference to the linked Secret, not a copy: the
					// service follows its rotations.
					r.Spec.ServiceEndpointDefinition = append(r.Spec.ServiceEndpointDefinition, primazav1alpha1.ServiceEndpointDefinitionItem{
						Name: field.Name, ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: secretName, Key: key}})
					continue
				}
			}
		}
		return Registration{}, fmt.Errorf("%s %s: %s: %w", resource.GetKind(), resource.GetName(), field.Name, err)
	}
	if len(r.Spec.ServiceEndpointDefinition) == 0 {
		return Registration{}, fmt.Errorf("%s %s: the class maps no endpoint definition", resource.GetKind(), resource.GetName())
	}
	return r, nil
}

// resolve is a ValueSource's value for resource.
func resolve(resource *unstructured.Unstructured, v primazav1alpha1.ValueSource) (string, error) {
	switch {
	case v.Constant != nil:
		return *v.Constant, nil
	case v.JSONPath != nil:
		return Eval(resource, *v.JSONPath)
	default:
		return "", fmt.Errorf("neither a constant nor a jsonPath")
	}
}

// Eval evaluates a JSONPath ({.spec.host}, or .spec.host as Primaza writes
// it) on resource: one value, as text (a number or an object as JSON).
func Eval(resource *unstructured.Unstructured, path string) (string, error) {
	expr := path
	if !strings.HasPrefix(strings.TrimSpace(expr), "{") {
		expr = "{" + expr + "}"
	}
	jp := jsonpath.New("field")
	if err := jp.Parse(expr); err != nil {
		return "", fmt.Errorf("jsonPath %s does not parse: %w", path, err)
	}
	results, err := jp.FindResults(resource.Object)
	if err != nil {
		return "", fmt.Errorf("jsonPath %s finds nothing: %w", path, err)
	}
	var values []any
	for _, set := range results {
		for _, v := range set {
			values = append(values, v.Interface())
		}
	}
	switch {
	case len(values) == 0:
		return "", fmt.Errorf("jsonPath %s finds nothing", path)
	case len(values) > 1:
		return "", fmt.Errorf("jsonPath %s finds %d values, not one", path, len(values))
	}
	if s, ok := values[0].(string); ok {
		return s, nil
	}
	raw, err := json.Marshal(values[0])
	if err != nil {
		return "", fmt.Errorf("jsonPath %s: %w", path, err)
	}
	return string(raw), nil
}
