package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

func planWithSchema(t *testing.T, schema string) *osbv1alpha1.SFPlan {
	t.Helper()
	raw := `{"service_binding": {"create": {"parameters": ` + schema + `}}}`
	require.True(t, json.Valid([]byte(raw)), raw)
	return &osbv1alpha1.SFPlan{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(schema), ResourceVersion: "1"},
		Spec:       osbv1alpha1.SFPlanSpec{Name: "p", Schemas: &apiextensionsv1.JSON{Raw: []byte(raw)}},
	}
}

// TestSchemaDrafts: each draft's own keywords are honoured, so a plan's
// schema means what its $schema says.
func TestSchemaDrafts(t *testing.T) {
	for _, tc := range []struct {
		name, schema, valid, invalid, message string
	}{
		{"draft-04 exclusiveMaximum is a boolean",
			`{"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"n": {"maximum": 5, "exclusiveMaximum": true}}}`,
			`{"n": 4}`, `{"n": 5}`, "parameters/n: exclusiveMaximum: got 5, want 5"},
		{"draft-06 const",
			`{"$schema": "http://json-schema.org/draft-06/schema#", "properties": {"tier": {"const": "gold"}}}`,
			`{"tier": "gold"}`, `{"tier": "silver"}`, "parameters/tier: value must be 'gold'"},
		{"draft-07 if/then",
			`{"$schema": "http://json-schema.org/draft-07/schema#", "if": {"required": ["ha"]}, "then": {"required": ["replicas"]}}`,
			`{"ha": true, "replicas": 3}`, `{"ha": true}`, "parameters: missing property 'replicas'"},
		{"2020-12 prefixItems",
			`{"$schema": "https://json-schema.org/draft/2020-12/schema", "properties": {"pair": {"prefixItems": [{"type": "string"}, {"type": "integer"}]}}}`,
			`{"pair": ["a", 1]}`, `{"pair": ["a", "b"]}`, "parameters/pair/1: got string, want integer"},
		{"no $schema is draft 7",
			`{"properties": {"n": {"type": "integer"}}}`,
			`{"n": 1}`, `{"n": 1.5}`, "parameters/n: got number, want integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s schemas
			plan := planWithSchema(t, tc.schema)
			assert.Nil(t, s.validate(plan, bindingCreate, json.RawMessage(tc.valid)))
			e := s.validate(plan, bindingCreate, json.RawMessage(tc.invalid))
			require.NotNil(t, e)
			assert.Equal(t, 400, e.status)
			assert.Equal(t, `parameters do not match the service_binding create schema of plan "p": `+tc.message, e.description)
		})
	}
}

// TestSchemaExternalRefs: a plan cannot make the broker read a file or
// fetch a URL through $ref; its requests fail with a 500 that says why.
func TestSchemaExternalRefs(t *testing.T) {
	var s schemas
	plan := planWithSchema(t, `{"$ref": "file:///etc/passwd"}`)
	e := s.validate(plan, bindingCreate, json.RawMessage(`{}`))
	require.NotNil(t, e)
	assert.Equal(t, 500, e.status)
	assert.Contains(t, e.description, `plan "p": its service_binding create parameters schema does not compile`)
	assert.Contains(t, e.description, "external schema references are not allowed (file:///etc/passwd)")
}

// TestSchemaAbsent: a plan without schemas accepts any object.
func TestSchemaAbsent(t *testing.T) {
	var s schemas
	assert.Nil(t, s.validate(&osbv1alpha1.SFPlan{}, instanceCreate, json.RawMessage(`{"anything": [1]}`)))
}
