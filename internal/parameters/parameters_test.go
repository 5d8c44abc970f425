package parameters

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
			var c Checker
			plan := planWithSchema(t, tc.schema)
			require.NoError(t, c.Check(plan, BindingCreate, json.RawMessage(tc.valid)))
			err := c.Check(plan, BindingCreate, json.RawMessage(tc.invalid))
			var v *Violation
			require.ErrorAs(t, err, &v)
			assert.Equal(t, `parameters do not match the service_binding create schema of plan "p": `+tc.message, v.Message)
		})
	}
}

// TestSchemaExternalRefs: a plan cannot make the broker read a file or
// fetch a URL through $ref; the check fails with an error of the plan's
// (not a Violation) that says why.
func TestSchemaExternalRefs(t *testing.T) {
	var c Checker
	plan := planWithSchema(t, `{"$ref": "file:///etc/passwd"}`)
	err := c.Check(plan, BindingCreate, json.RawMessage(`{}`))
	require.Error(t, err)
	var v *Violation
	assert.NotErrorAs(t, err, &v, "a broken schema is not the requester's fault")
	assert.Contains(t, err.Error(), `plan "p": its service_binding create parameters schema does not compile`)
	assert.Contains(t, err.Error(), "external schema references are not allowed (file:///etc/passwd)")
}

// TestSchemaAbsent: a plan without schemas accepts any object.
func TestSchemaAbsent(t *testing.T) {
	var c Checker
	assert.NoError(t, c.Check(&osbv1alpha1.SFPlan{}, InstanceCreate, json.RawMessage(`{"anything": [1]}`)))
}
