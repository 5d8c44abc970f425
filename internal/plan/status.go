package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

// Sources decodes the output of a sources template: a map from a key to the
// object it names.
func Sources(rendered string) (map[string]Source, error) {
	var out map[string]Source
	if err := yaml.UnmarshalStrict([]byte(rendered), &out); err != nil {
		return nil, fmt.Errorf("sources template output: %w", err)
	}
	for key, s := range out {
		if s.APIVersion == "" || s.Kind == "" || s.Name == "" {
			return nil, fmt.Errorf("sources template output: %q needs apiVersion, kind and name", key)
		}
	}
	return out, nil
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
	// Response is the bind response, e.g. {"credentials": {...}}. A template
	// may write it as an object or, as the inter-operator's do, as a JSON
	// string.
	Response map[string]any `json:"-"`
}

// Statuses decodes the output of a status template: a map from an operation
// (provision, update, deprovision, bind, unbind) to its status.
func Statuses(rendered string) (map[string]Status, error) {
	var raw map[string]map[string]any
	if err := yaml.Unmarshal([]byte(rendered), &raw); err != nil {
		return nil, fmt.Errorf("status template output: %w", err)
	}
	out := make(map[string]Status, len(raw))
	for op, fields := range raw {
		resp := fields["response"]
		delete(fields, "response")
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("status template output, %s: %w", op, err)
		}
		var s Status
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("status template output, %s: %w", op, err)
		}
		if s.Response, err = response(resp); err != nil {
			return nil, fmt.Errorf("status template output, %s.response: %w", op, err)
		}
		out[op] = s
	}
	return out, nil
}

func response(v any) (map[string]any, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case string:
		if r == "" {
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
		return nil, fmt.Errorf("want an object or a JSON string, got %T", v)
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

// DecodeBindResponse reads a bind.response. A field of the wrong shape (a
// port that is a number, say) is a *TemplateError that names it.
func DecodeBindResponse(response map[string]any) (*BindResponse, error) {
	raw, err := json.Marshal(response)
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
