package parameters

import (
	"encoding/json"
	"fmt"
	"strings"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// ValuesPathKeyword, in the schema of a property, names the path of a Helm
// chart's values that the parameter sets ("persistence.size"); without it
// a declared parameter sets the value at its own path.
const ValuesPathKeyword = "x-quartermaster-values-path"

// ChartValues are the parameters a Helm chart's values take from a request:
// only those that the plan's schemas for uses declare (a property of the
// schema's properties, nested as deep as the schema describes objects),
// each at the path the schema maps it to. A parameter the schema does not
// declare never reaches the values, so a requester cannot set what the
// chart's author did not expose; the template still reads it, as every
// template can, in .Values.instance.spec.parameters. A plan without a
// schema for any of uses gives none.
func ChartValues(plan *osbv1alpha1.SFPlan, params json.RawMessage, uses ...Use) (map[string]any, error) {
	out := map[string]any{}
	if plan.Spec.Schemas == nil || len(params) == 0 {
		return out, nil
	}
	var given map[string]any
	if err := json.Unmarshal(params, &given); err != nil || given == nil {
		return out, nil // parameters that are no object set nothing: the check refuses them
	}
	var doc map[string]map[string]struct {
		Parameters map[string]any `json:"parameters"`
	}
	if err := json.Unmarshal(plan.Spec.Schemas.Raw, &doc); err != nil {
		return nil, fmt.Errorf("plan %q has schemas that are not OSB schemas: %w", plan.Spec.Name, err)
	}
	for _, use := range uses {
		if schema := doc[use.Object][use.Action].Parameters; schema != nil {
			if err := declared(schema, given, nil, out); err != nil {
				return nil, fmt.Errorf("plan %q, %s %s parameters schema: %w", plan.Spec.Name, use.Object, use.Action, err)
			}
		}
	}
	return out, nil
}

// declared copies into out the members of given that schema's properties
// declare; at is the path of given in the parameters.
func declared(schema, given map[string]any, at []string, out map[string]any) error {
	props, _ := schema["properties"].(map[string]any)
	for name, value := range given {
		prop, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		path := append(append([]string{}, at...), name)
		if mapped, ok := prop[ValuesPathKeyword]; ok {
			s, isString := mapped.(string)
			if !isString || s == "" || strings.Contains(s, "..") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
				return fmt.Errorf("%s of %s is %v, not a dotted path such as \"persistence.size\"", ValuesPathKeyword, strings.Join(path, "."), mapped)
			}
			set(out, strings.Split(s, "."), value)
			continue
		}
		nested, isObject := value.(map[string]any)
		if _, describes := prop["properties"]; describes && isObject {
			if err := declared(prop, nested, path, out); err != nil {
				return err
			}
			continue
		}
		set(out, path, value)
	}
	return nil
}

// set puts value at path in m, making the maps on the way (and replacing
// what is not one).
func set(m map[string]any, path []string, value any) {
	for _, key := range path[:len(path)-1] {
		next, ok := m[key].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[key] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
}
