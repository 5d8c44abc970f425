package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// DefaultMaxBodyBytes bounds a request body; OSB bodies are small, and a
// larger one is refused with 413 before it is read into memory.
const DefaultMaxBodyBytes = 1 << 20

// The OSB request bodies. Raw JSON fields are kept as sent, so that they
// are stored and compared exactly; unknown fields are ignored, as the spec
// asks of brokers.
type (
	provisionRequest struct {
		ServiceID        string                       `json:"service_id"`
		PlanID           string                       `json:"plan_id"`
		Context          json.RawMessage              `json:"context,omitempty"`
		OrganizationGUID string                       `json:"organization_guid,omitempty"`
		SpaceGUID        string                       `json:"space_guid,omitempty"`
		Parameters       json.RawMessage              `json:"parameters,omitempty"`
		MaintenanceInfo  *osbv1alpha1.MaintenanceInfo `json:"maintenance_info,omitempty"`
	}
	updateRequest struct {
		ServiceID       string                       `json:"service_id"`
		PlanID          string                       `json:"plan_id,omitempty"`
		Context         json.RawMessage              `json:"context,omitempty"`
		Parameters      json.RawMessage              `json:"parameters,omitempty"`
		PreviousValues  json.RawMessage              `json:"previous_values,omitempty"`
		MaintenanceInfo *osbv1alpha1.MaintenanceInfo `json:"maintenance_info,omitempty"`
	}
	bindRequest struct {
		ServiceID    string          `json:"service_id"`
		PlanID       string          `json:"plan_id"`
		Context      json.RawMessage `json:"context,omitempty"`
		AppGUID      string          `json:"app_guid,omitempty"` // deprecated in OSB, still sent by some platforms
		BindResource *bindResource   `json:"bind_resource,omitempty"`
		Parameters   json.RawMessage `json:"parameters,omitempty"`
		// PredecessorBindingID rotates that binding (OSB 2.17).
		PredecessorBindingID string `json:"predecessor_binding_id,omitempty"`
	}
	bindResource struct {
		AppGUID string `json:"app_guid,omitempty"`
		Route   string `json:"route,omitempty"`
	}
)

// requestError is a request the spec says to refuse: it becomes an OSB
// error body with the status and, where the spec names one, the error code.
type requestError struct {
	status      int
	code        string
	description string
	// cause is the broker's own failure behind a 500: the log's to keep,
	// not the client's to read (failure).
	cause error
}

func (e *requestError) Error() string { return e.description }

// failure is a 500 for a step of the broker's own that failed: the answer
// names the step, the log the cause.
func failure(doing string, err error) *requestError {
	return &requestError{status: http.StatusInternalServerError, description: doing, cause: err}
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, description: fmt.Sprintf(format, args...)}
}

// decodeBody reads a JSON request body into v. It refuses a body that is
// not application/json, larger than limit, malformed, followed by more
// data, or whose fields have the wrong JSON type, naming the field.
func decodeBody(r *http.Request, limit int64, v any) *requestError {
	if ct := r.Header.Get("Content-Type"); ct == "" {
		return badRequest("the Content-Type header is missing; send application/json")
	} else if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return badRequest("Content-Type %q is not supported; send application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &requestError{status: http.StatusRequestEntityTooLarge,
			description: fmt.Sprintf("the request body is larger than %d bytes", limit)}
	}
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	return decodeJSON(body, v)
}

// decodeJSON is the body decoding without HTTP, which the fuzz test drives.
func decodeJSON(body []byte, v any) *requestError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return badRequest("%s must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
		case errors.As(err, &typeErr):
			return badRequest("the request body must be a JSON object, not %s", typeErr.Value)
		case errors.As(err, &syntaxErr):
			return badRequest("the request body is not valid JSON: %v (at byte %d)", err, syntaxErr.Offset)
		default:
			return badRequest("the request body is not valid JSON: %v", err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("the request body holds more than one JSON value")
	}
	return nil
}

// jsonKind names a Go kind as the JSON type a client should have sent.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}

// validate checks what every provision request needs: OSB 2.17 requires
// organization_guid and space_guid as non-empty strings, though it
// deprecates them in favour of context.
func (p *provisionRequest) validate() *requestError {
	if err := validateCreate(p.ServiceID, p.PlanID, p.Context, p.Parameters); err != nil {
		return err
	}
	if err := required("organization_guid", p.OrganizationGUID, "space_guid", p.SpaceGUID); err != nil {
		return err
	}
	return maintenanceInfoVersion(p.MaintenanceInfo)
}

func (u *updateRequest) validate() *requestError {
	if err := required("service_id", u.ServiceID); err != nil {
		return err
	}
	if err := maintenanceInfoVersion(u.MaintenanceInfo); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"context", u.Context}, {"parameters", u.Parameters}, {"previous_values", u.PreviousValues}} {
		if err := objectOrAbsent(f.name, f.raw); err != nil {
			return err
		}
	}
	return nil
}

func (b *bindRequest) validate() *requestError {
	if b.PredecessorBindingID != "" {
		if e := checkID("predecessor_binding_id", b.PredecessorBindingID); e != nil {
			return e
		}
	}
	return validateCreate(b.ServiceID, b.PlanID, b.Context, b.Parameters)
}

// validateCreate checks what provision and bind requests both need: the
// service and plan IDs, and context and parameters that are objects if given.
func validateCreate(serviceID, planID string, reqContext, parameters json.RawMessage) *requestError {
	if err := required("service_id", serviceID, "plan_id", planID); err != nil {
		return err
	}
	if err := objectOrAbsent("context", reqContext); err != nil {
		return err
	}
	return objectOrAbsent("parameters", parameters)
}

// appGUID is the app a bind request is for, from bind_resource or the
// deprecated top-level field.
func (b *bindRequest) appGUID() string {
	if b.BindResource != nil && b.BindResource.AppGUID != "" {
		return b.BindResource.AppGUID
	}
	return b.AppGUID
}

// required refuses a request in which one of the named fields is empty;
// pairs are name, value.
func required(pairs ...string) *requestError {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return badRequest("%s is required", pairs[i])
		}
	}
	return nil
}

// maintenanceInfoVersion refuses a maintenance_info without its REQUIRED
// version: a malformed request, not a conflict with the catalog.
func maintenanceInfoVersion(m *osbv1alpha1.MaintenanceInfo) *requestError {
	if m != nil && m.Version == "" {
		return badRequest("maintenance_info.version is required")
	}
	return nil
}

// objectOrAbsent refuses a field that is present but not a JSON object.
func objectOrAbsent(name string, raw json.RawMessage) *requestError {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" || t[0] == '{' {
		return nil
	}
	return badRequest("%s must be a JSON object", name)
}

// maxIdentityBytes bounds X-Broker-API-Originating-Identity: a platform's
// user (Cloud Foundry's user_id, Kubernetes' username, groups and extra)
// fits many times over, and the decoded JSON is kept in an annotation,
// whose total the API server caps at 256 KiB: a larger header failed the
// resource's write with a 500.
const maxIdentityBytes = 8 << 10

// originatingIdentity decodes X-Broker-API-Originating-Identity, "<platform>
// <base64 JSON object>", into the JSON stored on the resource. An absent
// header gives "".
func originatingIdentity(header string) (string, *requestError) {
	if header == "" {
		return "", nil
	}
	if len(header) > maxIdentityBytes {
		return "", badRequest("X-Broker-API-Originating-Identity is %d bytes; at most %d are taken", len(header), maxIdentityBytes)
	}
	platform, value, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || platform == "" || value == "" {
		return "", badRequest("X-Broker-API-Originating-Identity must be \"<platform> <base64-encoded JSON object>\"")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return "", badRequest("the value of X-Broker-API-Originating-Identity is not base64: %v", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", badRequest("the value of X-Broker-API-Originating-Identity is not a JSON object: %v", err)
	}
	out, err := json.Marshal(struct {
		Platform string         `json:"platform"`
		Value    map[string]any `json:"value"`
	}{platform, obj})
	if err != nil {
		return "", badRequest("re-encoding X-Broker-API-Originating-Identity: %v", err)
	}
	return string(out), nil
}
