package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// schemaPlan declares a draft-06 create schema (the seed's) and a 2020-12
// update schema.
const schemaPlan = `  schemas:
    service_instance:
      create:
        parameters:
          $schema: http://json-schema.org/draft-06/schema#
          type: object
          additionalProperties: false
          properties:
            size: {type: string, enum: [small, medium, large]}
            replicas: {type: integer, minimum: 1}
          required: [size]
      update:
        parameters:
          $schema: https://json-schema.org/draft/2020-12/schema
          type: object
          properties:
            replicas: {type: integer, maximum: 5}`

// TestOSBRefusals sends every kind of bad provision request. Each gets the
// spec's status and an error body that says what is wrong, and none leaves
// an SFServiceInstance behind.
func TestOSBRefusals(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true})
	plan := s.Plan("checked", schemaPlan+"\n  maintenance_info: {version: 1.0.0}", testenv.Templates("instant"))
	async := s.Plan("async", "  manager: {async: true}", testenv.Templates("instant"))
	other := testenv.Start(t, testenv.Parts{API: true})
	foreign := other.Plan("foreign", "", testenv.Templates("instant"))
	second := s.Namespace + "-second"
	s.Create(fmt.Sprintf(`{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFService", "metadata": {"name": "second", "namespace": %q},
		"spec": {"name": "second", "id": %q, "description": "another service of the broker", "bindable": true}}`, s.Namespace, second))
	valid := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "small"}}`, s.ServiceID, plan)
	put := "/v2/service_instances/bad-1"

	for _, tc := range []struct {
		name    string
		path    string
		body    string
		header  map[string]string
		status  int
		want    string // the description, or the whole body when it starts with {
		errCode string
	}{
		{name: "malformed JSON", body: `{"service_id": `, status: 400,
			want: "the request body is not valid JSON: unexpected EOF"},
		{name: "not an object", body: `[1, 2]`, status: 400, want: "the request body must be a JSON object, not array"},
		{name: "two values", body: valid + valid, status: 400, want: "the request body holds more than one JSON value"},
		{name: "empty body", body: " ", status: 400, want: "the request body is empty; send a JSON object"},
		{name: "a field of the wrong type", body: fmt.Sprintf(`{"service_id": 7, "plan_id": %q}`, plan), status: 400,
			want: "service_id must be a string, not number"},
		{name: "missing service_id", body: fmt.Sprintf(`{"plan_id": %q}`, plan), status: 400, want: "service_id is required"},
		{name: "missing plan_id", body: fmt.Sprintf(`{"service_id": %q}`, s.ServiceID), status: 400, want: "plan_id is required"},
		{name: "parameters not an object", body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": "big"}`, s.ServiceID, plan),
			status: 400, want: "parameters must be a JSON object"},
		{name: "wrong Content-Type", body: valid, header: map[string]string{"Content-Type": "text/plain"}, status: 400,
			want: `Content-Type "text/plain" is not supported; send application/json`},
		{name: "no Content-Type", body: valid, header: map[string]string{"Content-Type": ""}, status: 400,
			want: "the Content-Type header is missing; send application/json"},
		{name: "unknown plan", body: fmt.Sprintf(`{"service_id": %q, "plan_id": "nope", "organization_guid": "org", "space_guid": "space"}`, s.ServiceID), status: 400,
			want: `plan_id "nope" is not in the catalog`},
		{name: "an unknown service", body: fmt.Sprintf(`{"service_id": "nope", "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, plan), status: 400,
			want: `service_id "nope" is not in the catalog`},
		{name: "a plan of another service", body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, second, plan), status: 400,
			want: fmt.Sprintf(`plan_id %q is not a plan of service_id %q`, plan, second)},
		{name: "a service outside the broker's namespace", body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, other.ServiceID, foreign), status: 400,
			want: fmt.Sprintf(`service_id %q is not in the catalog`, other.ServiceID)},
		{name: "a plan outside the broker's namespace", body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, foreign), status: 400,
			want: fmt.Sprintf(`plan_id %q is not in the catalog`, foreign)},
		{name: "parameters against the draft-06 schema", status: 400,
			body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "huge", "replicas": 0, "color": "red"}}`, s.ServiceID, plan),
			want: `parameters do not match the service_instance create schema of plan "checked": ` +
				`parameters/replicas: minimum: got 0, want 1; parameters/size: value must be one of 'small', 'medium', 'large'; parameters: additional properties 'color' not allowed`},
		{name: "a required parameter missing", status: 400,
			body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
			want: `parameters do not match the service_instance create schema of plan "checked": parameters: missing property 'size'`},
		{name: "maintenance_info the plan does not offer", status: 422, errCode: "MaintenanceInfoConflict",
			body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "small"}, "maintenance_info": {"version": "0.9.0"}}`, s.ServiceID, plan),
			want: `maintenance_info.version "0.9.0" does not match the catalog's for plan "checked" (1.0.0)`},
		{name: "an async plan without accepts_incomplete", status: 422, errCode: "AsyncRequired",
			body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, async),
			want: `plan "async" runs its operations asynchronously; repeat the request with accepts_incomplete=true`},
		{name: "a malformed originating identity", body: valid, status: 400,
			header: map[string]string{"X-Broker-API-Originating-Identity": "cloudfoundry not-base64!"},
			want:   "the value of X-Broker-API-Originating-Identity is not base64: illegal base64 data at input byte 3"},
		{name: "an originating identity without a value", body: valid, status: 400,
			header: map[string]string{"X-Broker-API-Originating-Identity": "cloudfoundry"},
			want:   `X-Broker-API-Originating-Identity must be "<platform> <base64-encoded JSON object>"`},
		{name: "an originating identity over its limit", body: valid, status: 400,
			header: map[string]string{"X-Broker-API-Originating-Identity": identity("cloudfoundry", fmt.Sprintf(`{"user_id": %q}`, strings.Repeat("u", 100<<10)))},
			want:   "X-Broker-API-Originating-Identity is 136569 bytes; at most 8192 are taken"},
		{name: "a body over the size limit", status: 413,
			body: fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "small", "pad": %q}}`, s.ServiceID, plan, strings.Repeat("x", 1<<20)),
			want: "the request body is larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, header := s.Do(http.MethodPut, put, tc.body, tc.header)
			assert.Equal(t, tc.status, status, body)
			assert.Equal(t, "application/json", header.Get("Content-Type"))
			want := fmt.Sprintf(`{"description": %q}`, tc.want)
			if tc.errCode != "" {
				want = fmt.Sprintf(`{"error": %q, "description": %q}`, tc.errCode, tc.want)
			}
			assert.JSONEq(t, want, body)
			assert.Zero(t, s.CountInstances(), "a refused request leaves nothing behind")
		})
	}

	// Unknown instances, on every endpoint.
	q := fmt.Sprintf("?service_id=%s&plan_id=%s", s.ServiceID, plan)
	s.Expect(http.MethodDelete, "/v2/service_instances/nobody"+q, "", http.StatusGone, `{}`)
	s.Expect(http.MethodDelete, "/v2/service_instances/nobody", "", http.StatusBadRequest,
		`{"description": "the query parameter service_id is required"}`)
	s.Expect(http.MethodGet, "/v2/service_instances/nobody", "", http.StatusNotFound, `{"description": "instance \"nobody\" does not exist"}`)
	s.Expect(http.MethodGet, "/v2/service_instances/nobody/last_operation", "", http.StatusNotFound, `{"description": "instance \"nobody\" does not exist"}`)
	s.Expect(http.MethodGet, "/v2/service_instances/nobody/last_operation?operation=deprovision", "", http.StatusGone, `{}`)
	s.Expect(http.MethodPatch, "/v2/service_instances/nobody", fmt.Sprintf(`{"service_id": %q}`, s.ServiceID), http.StatusNotFound,
		`{"description": "instance \"nobody\" does not exist"}`)
	s.Expect(http.MethodPut, "/v2/service_instances/nobody/service_bindings/b", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusNotFound, `{"description": "instance \"nobody\" does not exist"}`)
	s.Expect(http.MethodDelete, "/v2/service_instances/nobody/service_bindings/b"+q, "", http.StatusGone, `{}`)
	s.Expect(http.MethodGet, "/v2/service_instances/nobody/service_bindings/b", "", http.StatusNotFound,
		`{"description": "binding \"b\" of instance \"nobody\" does not exist"}`)
	s.Expect(http.MethodGet, "/v2/service_instances/nobody/service_bindings/b/last_operation?operation=unbind", "", http.StatusGone, `{}`)
	assert.Zero(t, s.CountInstances())

	// An ID that is not a Kubernetes name is recorded under its hash, and
	// the ID itself stays in the spec.
	// (There is no worker here: the synchronous plan gives up waiting, and
	// answers 202 as the client accepts it.)
	s.API.SyncTimeout = 100 * time.Millisecond
	s.Expect(http.MethodPut, "/v2/service_instances/Team_A:db?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "small"}}`, s.ServiceID, plan), http.StatusAccepted, `{"operation": "provision"}`)
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(t, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "Team_A:db", list.Items[0].Spec.InstanceID)
	assert.Len(t, list.Items[0].Name, 56, "the SHA-224 of the ID")
}

// TestOSBBindRefusals: a bind the plan cannot serve is refused before
// anything is recorded.
func TestOSBBindRefusals(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	appOnly := s.Plan("app-only", "  manager: {requiresApp: true}", testenv.Templates("instant"))
	asyncBind := s.Plan("async-bind", "  manager: {asyncBinding: true}", testenv.Templates("instant"))
	unbindable := s.Plan("unbindable", "  bindable: false", testenv.Templates("instant"))
	for _, p := range []string{appOnly, asyncBind, unbindable} {
		s.Expect(http.MethodPut, "/v2/service_instances/"+p, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, p), http.StatusCreated, `{}`)
	}
	bind := func(instance, body string) string {
		return fmt.Sprintf(`{"service_id": %q, "plan_id": %q%s}`, s.ServiceID, instance, body)
	}
	s.Expect(http.MethodPut, "/v2/service_instances/"+appOnly+"/service_bindings/b1", bind(appOnly, ""),
		http.StatusUnprocessableEntity, `{"error": "RequiresApp", "description": "plan \"app-only\" binds to apps only: bind_resource.app_guid is required"}`)
	s.Expect(http.MethodPut, "/v2/service_instances/"+asyncBind+"/service_bindings/b2", bind(asyncBind, ""),
		http.StatusUnprocessableEntity, `{"error": "AsyncRequired", "description": "plan \"async-bind\" binds asynchronously; repeat the request with accepts_incomplete=true"}`)
	s.Expect(http.MethodPut, "/v2/service_instances/"+unbindable+"/service_bindings/b3", bind(unbindable, ""),
		http.StatusBadRequest, fmt.Sprintf(`{"description": "plan \"unbindable\" of service \"%s\" is not bindable"}`, s.Namespace))
	s.Expect(http.MethodPut, "/v2/service_instances/"+appOnly+"/service_bindings/b4", bind(asyncBind, ""),
		http.StatusBadRequest, "")
	var list osbv1alpha1.SFServiceBindingList
	require.NoError(t, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	assert.Empty(t, list.Items, "no refused bind leaves a binding behind")

	// With what they ask for, they bind: the app's GUID, or asynchronously.
	s.Expect(http.MethodPut, "/v2/service_instances/"+appOnly+"/service_bindings/b1", bind(appOnly, `, "bind_resource": {"app_guid": "app-1"}`),
		http.StatusCreated, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodPut, "/v2/service_instances/"+asyncBind+"/service_bindings/b2?accepts_incomplete=true", bind(asyncBind, ""),
		http.StatusAccepted, `{"operation": "bind"}`)
	assert.Equal(t, map[string]any{"state": "succeeded"},
		s.PollLastOperation("/v2/service_instances/"+asyncBind+"/service_bindings/b2/last_operation?operation=bind"))
	s.Expect(http.MethodGet, "/v2/service_instances/"+asyncBind+"/service_bindings/b2", "", http.StatusOK, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/%s/service_bindings/b2?service_id=%s&plan_id=%s", asyncBind, s.ServiceID, asyncBind), "",
		http.StatusUnprocessableEntity, "")
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/%s/service_bindings/b2?service_id=%s&plan_id=%s&accepts_incomplete=true", asyncBind, s.ServiceID, asyncBind), "",
		http.StatusAccepted, `{"operation": "unbind"}`)
}

// TestOSBUpdateAndDeleteRefusals: updates and deletes the plan or the
// instance's state does not allow are refused, and an update that asks for
// nothing new is a 200 that starts nothing.
func TestOSBUpdateAndDeleteRefusals(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	fixed := s.Plan("fixed", "  planUpdatable: false\n  manager: {async: true}", testenv.Templates("instant"))
	other := s.Plan("other", "  manager: {async: true}", testenv.Templates("instant"))
	inst := "/v2/service_instances/upd-1"
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"a": 1}}`, s.ServiceID, fixed),
		http.StatusAccepted, `{"operation": "provision"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(inst + "/last_operation")["state"])

	s.Expect(http.MethodPatch, inst, fmt.Sprintf(`{"service_id": %q, "parameters": {"a": 2}}`, s.ServiceID), http.StatusUnprocessableEntity,
		`{"error": "AsyncRequired", "description": "plan \"fixed\" runs its operations asynchronously; repeat the request with accepts_incomplete=true"}`)
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, other), http.StatusBadRequest,
		`{"description": "the plan of instance \"upd-1\" cannot be changed: its plan is not plan_updateable"}`)
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", `{"service_id": "another"}`, http.StatusBadRequest,
		fmt.Sprintf(`{"description": "service_id \"another\" is not the service of instance \"upd-1\" (\"%s\")"}`, s.ServiceID))
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "parameters": {"a": 1}}`, s.ServiceID), http.StatusOK, `{}`)
	got, err := s.GetInstance("upd-1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Generation, "a PATCH that asks for nothing new changes nothing")

	// An instance whose deletion is held (here by another finalizer) is
	// being deprovisioned: a PUT is a ConcurrencyError, last_operation says
	// in progress, and once it is gone, 410.
	base := got.DeepCopy()
	got.Finalizers = append(got.Finalizers, "test.quartermaster.io/hold")
	require.NoError(t, s.Kube.Client.Patch(context.Background(), got, ctrlclient.MergeFrom(base)))
	deprovision := inst + fmt.Sprintf("?service_id=%s&plan_id=%s", s.ServiceID, fixed)
	s.Expect(http.MethodDelete, deprovision, "", http.StatusUnprocessableEntity,
		`{"error": "AsyncRequired", "description": "plan \"fixed\" runs its operations asynchronously; repeat the request with accepts_incomplete=true"}`)
	s.Expect(http.MethodDelete, deprovision+"&accepts_incomplete=true", "", http.StatusAccepted, `{"operation": "deprovision"}`)
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"a": 1}}`, s.ServiceID, fixed),
		http.StatusUnprocessableEntity, `{"error": "ConcurrencyError", "description": "instance \"upd-1\" is being deprovisioned"}`)
	s.Expect(http.MethodGet, inst+"/last_operation?operation=deprovision", "", http.StatusOK,
		`{"state": "in progress", "description": "deprovision in progress"}`)
	s.Expect(http.MethodDelete, deprovision+"&accepts_incomplete=true", "", http.StatusAccepted, `{"operation": "deprovision"}`)
	require.Eventually(t, func() bool {
		got, err = s.GetInstance("upd-1")
		return err == nil && len(got.Finalizers) == 1
	}, 30*time.Second, 50*time.Millisecond, "the Deprovision workflow releases its finalizer")
	base = got.DeepCopy()
	got.Finalizers = nil
	require.NoError(t, s.Kube.Client.Patch(context.Background(), got, ctrlclient.MergeFrom(base)))
	s.ExpectSoon(inst+"/last_operation?operation=deprovision", http.StatusGone, `{}`)
}

// TestOSBSchemasOnRequests: a plan's JSON Schemas judge provision and
// update requests over HTTP: a draft 2019-09 create schema, and an update
// schema that refuses what the create schema allowed. A refused request
// changes nothing.
func TestOSBSchemasOnRequests(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("schemas", `  schemas:
    service_instance:
      create:
        parameters:
          $schema: https://json-schema.org/draft/2019-09/schema
          type: object
          properties:
            ha: {type: boolean}
            replicas: {type: integer}
          dependentRequired: {ha: [replicas]}
      update:
        parameters:
          type: object
          properties:
            replicas: {type: integer, maximum: 5}`, testenv.Templates("instant"))
	inst := "/v2/service_instances/sch-1"
	create := func(params string) string {
		return fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": %s}`, s.ServiceID, plan, params)
	}

	body := s.Expect(http.MethodPut, inst, create(`{"ha": true}`), http.StatusBadRequest, "")
	assert.Contains(t, body, `parameters do not match the service_instance create schema of plan \"schemas\"`)
	assert.Contains(t, body, "replicas", "2019-09's dependentRequired is honoured")
	assert.Equal(t, 0, s.CountInstances())

	s.Expect(http.MethodPut, inst, create(`{"ha": true, "replicas": 3}`), http.StatusCreated, `{}`)
	body = s.Expect(http.MethodPatch, inst, fmt.Sprintf(`{"service_id": %q, "parameters": {"replicas": 9}}`, s.ServiceID), http.StatusBadRequest, "")
	assert.Contains(t, body, `parameters do not match the service_instance update schema of plan \"schemas\"`)
	assert.Contains(t, body, "parameters/replicas")
	got, err := s.GetInstance("sch-1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Generation, "the refused update changed nothing")
	assert.JSONEq(t, `{"ha": true, "replicas": 3}`, string(got.Spec.Parameters.Raw))
}

// TestOSBRequiredFields: every field OSB 2.17 marks REQUIRED, one row per
// field and request kind. Each refusal is a 400 that names the field, and
// leaves nothing recorded and nothing changed.
func TestOSBRequiredFields(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	inst := "/v2/service_instances/req-1"
	binding := inst + "/service_bindings/b-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{}`)
	s.Expect(http.MethodPut, binding, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan), http.StatusCreated, "")

	// fields of a valid body of each kind; a row drops or changes one.
	provision := map[string]any{"service_id": s.ServiceID, "plan_id": plan, "organization_guid": "org", "space_guid": "space"}
	update := map[string]any{"service_id": s.ServiceID, "parameters": map[string]any{"x": 1}}
	bind := map[string]any{"service_id": s.ServiceID, "plan_id": plan}
	without := func(body map[string]any, field string, value any) string {
		out := maps.Clone(body)
		if value == nil {
			delete(out, field)
		} else {
			out[field] = value
		}
		raw, err := json.Marshal(out)
		require.NoError(t, err)
		return string(raw)
	}
	query := func(serviceID, planID string) string {
		q := url.Values{}
		if serviceID != "" {
			q.Set("service_id", serviceID)
		}
		if planID != "" {
			q.Set("plan_id", planID)
		}
		return "?" + q.Encode()
	}
	for _, tc := range []struct {
		kind, field  string
		method, path string
		body, want   string
	}{
		{"provision", "service_id", http.MethodPut, "/v2/service_instances/req-2", without(provision, "service_id", nil), "service_id is required"},
		{"provision", "plan_id", http.MethodPut, "/v2/service_instances/req-2", without(provision, "plan_id", nil), "plan_id is required"},
		{"provision", "organization_guid", http.MethodPut, "/v2/service_instances/req-2", without(provision, "organization_guid", nil), "organization_guid is required"},
		{"provision", "organization_guid empty", http.MethodPut, "/v2/service_instances/req-2", without(provision, "organization_guid", ""), "organization_guid is required"},
		{"provision", "space_guid", http.MethodPut, "/v2/service_instances/req-2", without(provision, "space_guid", nil), "space_guid is required"},
		{"provision", "maintenance_info.version", http.MethodPut, "/v2/service_instances/req-2",
			without(provision, "maintenance_info", map[string]any{"description": "no version"}), "maintenance_info.version is required"},
		{"update", "service_id", http.MethodPatch, inst, without(update, "service_id", nil), "service_id is required"},
		{"update", "maintenance_info.version", http.MethodPatch, inst,
			without(update, "maintenance_info", map[string]any{"description": "no version"}), "maintenance_info.version is required"},
		{"bind", "service_id", http.MethodPut, inst + "/service_bindings/b-2", without(bind, "service_id", nil), "service_id is required"},
		{"bind", "plan_id", http.MethodPut, inst + "/service_bindings/b-2", without(bind, "plan_id", nil), "plan_id is required"},
		{"deprovision", "service_id", http.MethodDelete, inst + query("", plan), "", "the query parameter service_id is required"},
		{"deprovision", "plan_id", http.MethodDelete, inst + query(s.ServiceID, ""), "", "the query parameter plan_id is required"},
		{"deprovision", "plan_id not the instance's", http.MethodDelete, inst + query(s.ServiceID, "another"), "",
			fmt.Sprintf(`plan_id "another" is not the plan of instance "req-1" (%q)`, plan)},
		{"unbind", "service_id", http.MethodDelete, binding + query("", plan), "", "the query parameter service_id is required"},
		{"unbind", "plan_id", http.MethodDelete, binding + query(s.ServiceID, ""), "", "the query parameter plan_id is required"},
		{"unbind", "service_id not the binding's", http.MethodDelete, binding + query("another", plan), "",
			fmt.Sprintf(`service_id "another" is not the service of binding "b-1" (%q)`, s.ServiceID)},
	} {
		t.Run(tc.kind+" "+tc.field, func(t *testing.T) {
			s.Expect(tc.method, tc.path, tc.body, http.StatusBadRequest, fmt.Sprintf(`{"description": %q}`, tc.want))
		})
	}
	assert.Equal(t, 1, s.CountInstances(), "no instance was recorded")
	got, err := s.GetInstance("req-1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Generation, "and none was changed or deleted")
	assert.Nil(t, got.DeletionTimestamp)
	s.Expect(http.MethodGet, binding, "", http.StatusOK, "")
	s.Expect(http.MethodGet, inst+"/service_bindings/b-2", "", http.StatusNotFound, "")
}

// TestOSBUnknownRoutes: a path or a method the API does not serve gets
// the spec's JSON error body.
func TestOSBUnknownRoutes(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true})
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodGet, "/v2/nothing-here", http.StatusNotFound, "no route /v2/nothing-here"},
		{http.MethodGet, "/nothing-here", http.StatusNotFound, "no route /nothing-here"},
		{http.MethodPost, "/v2/catalog", http.StatusMethodNotAllowed, "POST is not allowed on /v2/catalog"},
		{http.MethodPost, "/v2/service_instances/x", http.StatusMethodNotAllowed, "POST is not allowed on /v2/service_instances/x"},
	} {
		status, body, header := s.Do(tc.method, tc.path, "", nil)
		assert.Equal(t, tc.status, status, "%s %s", tc.method, tc.path)
		assert.Equal(t, "application/json", header.Get("Content-Type"), "%s %s", tc.method, tc.path)
		assert.JSONEq(t, fmt.Sprintf(`{"description": %q}`, tc.want), body, "%s %s", tc.method, tc.path)
	}
}
