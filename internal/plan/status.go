package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Source is one object a sources template names: the status, bind and unbind
// templates see it under its key.
type Source struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
}

// SourceList is what a sources template's output says: the objects to
// read, and what was left out of them.
type SourceList struct {
	// Sources are the objects to read, by key.
	Sources map[string]Source
	// Unnamed are the keys whose name is empty: skipped, as the
	// inter-operator skips them (a plan lists its binding's object for
	// every operation, and an instance's operations have no binding).
	Unnamed []string
	// Ignored are the fields no source has ("secret.nmae"), skipped as the
	// inter-operator skips them; each is likely a typo.
	Ignored []string
}

// sourceFields are the fields of a Source.
var sourceFields = []string{"apiVersion", "kind", "name", "namespace"}

// Sources decodes the output of a sources template: a map from a key to the
// object it names. A source with a name but no apiVersion or kind cannot be
// read, and is an error.
func Sources(rendered string) (SourceList, error) {
	var raw map[string]map[string]any
	if err := yaml.Unmarshal([]byte(rendered), &raw); err != nil {
		return SourceList{}, fmt.Errorf("sources template output: %w", err)
	}
	list := SourceList{Sources: make(map[string]Source, len(raw))}
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		fields := raw[key]
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			if !slices.Contains(sourceFields, f) {
				list.Ignored = append(list.Ignored, key+"."+f)
				delete(fields, f)
			}
		}
		var s Source
		if err := remarshal(fields, &s); err != nil {
			return SourceList{}, fmt.Errorf("sources template output, %s: %w", key, err)
		}
		switch {
		case s.Name == "":
			list.Unnamed = append(list.Unnamed, key)
		case s.APIVersion == "" || s.Kind == "":
			return SourceList{}, fmt.Errorf("sources template output: %q names %q but needs an apiVersion and a kind to be read", key, s.Name)
		default:
			list.Sources[key] = s
		}
	}
	return list, nil
}

// Warnings are what a plan's author should hear of the list: fields no
// source has, and, for a binding's operation (forBinding), sources without
// a name, which then are never read. An instance's operations skip the
// binding's unnamed sources without a word: that is how a plan lists them.
func (l SourceList) Warnings(forBinding bool) []string {
	var out []string
	if forBinding {
		for _, key := range l.Unnamed {
			out = append(out, fmt.Sprintf("sources template: %q has no name, so the binding's templates never see it", key))
		}
	}
	for _, f := range l.Ignored {
		out = append(out, fmt.Sprintf("sources template: %s is not a field of a source (apiVersion, kind, name, namespace), and is ignored", f))
	}
	return out
}

// Status is what a status template says of one operation.
type Status struct {
	State            string `json:"state"`
	Description      string `json:"description,omitempty"`
	Error            string `json:"error,omitempty"`
	DashboardURL     string `json:"dashboardUrl,omitempty"`
	InstanceUsable   *bool  `json:"instanceUsable,omitempty"`
	UpdateRepeatable *bool  `json:"updateRepeatable,omitempty"`
	// Metadata is the instance's OSB metadata (labels and attributes,
	// string values), for a provision or an update.
	Metadata *osbv1alpha1.InstanceMetadata `json:"metadata,omitempty"`
	// Response is the bind response, e.g. {"credentials": {...}}, as the
	// template wrote it: an object or, as the inter-operator's do, a JSON
	// string. It is read only when a bind succeeds (DecodeBindResponse);
	// other operations' responses are free text, and ignored.
	Response any `json:"-"`
}

// StatusOf decodes what the output of a status template says of the
// operation op: its own section (an update's falls back to provision's),
// or nil when there is none. The output as a whole must be YAML, but only
// op's section is read: as in the inter-operator, a template renders every
// operation's section each time, and the others may not make sense yet (a
// bind's response while the instance is still provisioning).
func StatusOf(rendered, op string) (*Status, error) {
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(rendered), &raw); err != nil {
		return nil, fmt.Errorf("status template output: %w", err)
	}
	section, ok := raw[op]
	if !ok && op == "update" {
		op = "provision"
		section, ok = raw[op]
	}
	if !ok || section == nil {
		return nil, nil
	}
	fields, ok := section.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("status template output, %s: want a map of state, description, ..., got %s", op, jsonTypeOf(section))
	}
	resp := fields["response"]
	delete(fields, "response")
	var s Status
	if err := remarshal(fields, &s); err != nil {
		return nil, fmt.Errorf("status template output, %s: %w", op, err)
	}
	s.Response = resp
	return &s, nil
}

// remarshal decodes a JSON-shaped value into out, naming a field of the
// wrong type as a template's author would write it.
func remarshal(in any, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	err = json.Unmarshal(b, out)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%s must be %s, not %s", typeErr.Field, jsonType(typeErr.Type.Kind()), typeErr.Value)
	}
	return err
}

// jsonTypeOf names the JSON type of a decoded value.
func jsonTypeOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// responseObject reads a bind response written as an object or as a JSON
// string.
func responseObject(v any) (map[string]any, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case string:
		if strings.TrimSpace(r) == "" {
			return nil, nil
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(r), &m); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		return m, nil
	case map[string]any:
		return r, nil
	default:
		return nil, fmt.Errorf("want an object or a JSON string, got %s", jsonTypeOf(v))
	}
}

// BindResponse is a bind.response as OSB 2.17 spells it: the credentials,
// and the fields beside them that a binding's status keeps.
type BindResponse struct {
	Credentials     map[string]any                `json:"credentials,omitempty"`
	Endpoints       []osbv1alpha1.BindingEndpoint `json:"endpoints,omitempty"`
	VolumeMounts    json.RawMessage               `json:"volume_mounts,omitempty"`
	SyslogDrainURL  string                        `json:"syslog_drain_url,omitempty"`
	RouteServiceURL string                        `json:"route_service_url,omitempty"`
	// Metadata is OSB's metadata, whose fields are spelled expires_at and
	// renew_before; DecodeBindResponse reads them.
	Metadata *osbv1alpha1.BindingMetadata `json:"-"`
}

// DecodeBindResponse reads a bind.response, an object or a JSON string. A
// response that is neither, or a field of the wrong shape (a port that is
// a number, say), is a *TemplateError that names it.
func DecodeBindResponse(response any) (*BindResponse, error) {
	obj, err := responseObject(response)
	if err != nil {
		return nil, &TemplateError{err: fmt.Errorf("status template: bind.response: %w", err)}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, &TemplateError{err: fmt.Errorf("status template: bind.response: %w", err)}
	}
	var r struct {
		BindResponse
		Metadata *struct {
			ExpiresAt   string `json:"expires_at,omitempty"`
			RenewBefore string `json:"renew_before,omitempty"`
		} `json:"metadata,omitempty"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			err = fmt.Errorf("%s must be %s, not %s", strings.TrimPrefix(typeErr.Field, "BindResponse."), jsonType(typeErr.Type.Kind()), typeErr.Value)
		}
		return nil, &TemplateError{err: fmt.Errorf("status template: bind.response: %w", err)}
	}
	out := r.BindResponse
	if r.Metadata != nil {
		out.Metadata = &osbv1alpha1.BindingMetadata{ExpiresAt: r.Metadata.ExpiresAt, RenewBefore: r.Metadata.RenewBefore}
	}
	for i, e := range out.Endpoints {
		if e.Host == "" || len(e.Ports) == 0 {
			return nil, &TemplateError{err: fmt.Errorf("status template: bind.response: endpoints[%d] needs a host and ports", i)}
		}
	}
	return &out, nil
}

// jsonType names a Go kind as the JSON type a template should write.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	default:
		return "a number"
	}
}
