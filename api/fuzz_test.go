package api

import (
	"encoding/json"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/parameters"
)

// fuzzPlan has a schema for each kind of request, so that validation runs
// on every decoded body.
var fuzzPlan = &osbv1alpha1.SFPlan{
	ObjectMeta: metav1.ObjectMeta{UID: "fuzz", ResourceVersion: "1"},
	Spec: osbv1alpha1.SFPlanSpec{Name: "fuzz", Schemas: &apiextensionsv1.JSON{Raw: []byte(`{
		"service_instance": {
			"create": {"parameters": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
				"properties": {"size": {"enum": ["s", "m"]}, "n": {"type": "integer", "maximum": 9, "exclusiveMaximum": true}},
				"required": ["size"]}},
			"update": {"parameters": {"$schema": "https://json-schema.org/draft/2020-12/schema",
				"properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}], "uniqueItems": true}}}}
		},
		"service_binding": {"create": {"parameters": {"$schema": "http://json-schema.org/draft-07/schema#",
			"patternProperties": {"^x-": {"type": "string", "maxLength": 8}}, "additionalProperties": false}}}
	}`)}},
}

// FuzzRequest feeds arbitrary bodies and originating identities through
// the decoding and validation of every request kind. Whatever the input, it
// must end in nil or a 4xx requestError with a description, never a panic.
// `make test` runs it for a bounded time.
func FuzzRequest(f *testing.F) {
	f.Add(uint8(0), []byte(`{"service_id": "s", "plan_id": "p", "organization_guid": "o", "space_guid": "sp", "parameters": {"size": "s", "n": 3}}`), "cloudfoundry eyJ1c2VyX2lkIjoiYSJ9")
	f.Add(uint8(1), []byte(`{"service_id": "s", "parameters": {"tags": ["a", "a"]}, "previous_values": {}}`), "")
	f.Add(uint8(2), []byte(`{"service_id": "s", "plan_id": "p", "bind_resource": {"app_guid": "g"}, "parameters": {"x-a": "b"}}`), "kubernetes e30=")
	f.Add(uint8(0), []byte(`{"service_id": 1}`), "x !!")
	f.Add(uint8(1), []byte(`[]`), "")
	f.Add(uint8(2), []byte(`{"parameters": {"x-a": "toolongvalue"}} {}`), "p")
	var s Server
	f.Fuzz(func(t *testing.T, kind uint8, body []byte, identity string) {
		check := func(e *requestError) {
			if e != nil && (e.status < 400 || e.status >= 500 || e.description == "") {
				t.Fatalf("a request error must be a 4xx with a description, got %d %q", e.status, e.description)
			}
		}
		_, e := originatingIdentity(identity)
		check(e)
		var params json.RawMessage
		var use parameters.Use
		switch kind % 3 {
		case 0:
			var req provisionRequest
			if e = decodeJSON(body, &req); e == nil {
				e = req.validate()
			}
			params, use = req.Parameters, parameters.InstanceCreate
		case 1:
			var req updateRequest
			if e = decodeJSON(body, &req); e == nil {
				e = req.validate()
			}
			params, use = req.Parameters, parameters.InstanceUpdate
		default:
			var req bindRequest
			if e = decodeJSON(body, &req); e == nil {
				e = req.validate()
			}
			_ = req.appGUID()
			params, use = req.Parameters, parameters.BindingCreate
		}
		check(e)
		if e == nil {
			check(s.checkParameters(fuzzPlan, use, params))
		}
	})
}
