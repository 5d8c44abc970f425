package parameters

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// TestChartValues: only what a schema declares reaches a chart's values,
// at the path it maps.
func TestChartValues(t *testing.T) {
	const schema = `{"type": "object", "additionalProperties": true, "properties": {
		"size": {"type": "string"},
		"storage": {"type": "string", "x-quartermaster-values-path": "persistence.size"},
		"tls": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
		"labels": {"type": "object"}}}`
	for _, tc := range []struct {
		name, schemas, params, want string
	}{
		{"a declared parameter, at its own path", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`{"size": "large"}`, `{"size": "large"}`},
		{"one the schema does not declare is left out, additionalProperties or not", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`{"size": "large", "image": {"repository": "evil.example/miner"}}`, `{"size": "large"}`},
		{"mapped to the values path the schema names", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`{"storage": "10Gi"}`, `{"persistence": {"size": "10Gi"}}`},
		{"nested as deep as the schema describes", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`{"tls": {"enabled": true, "caKey": "stolen"}}`, `{"tls": {"enabled": true}}`},
		{"an object the schema does not describe is taken whole", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`{"labels": {"team": "a"}}`, `{"labels": {"team": "a"}}`},
		{"the update schema declares too", `{"service_instance": {"update": {"parameters": ` + schema + `}}}`,
			`{"size": "small", "x": 1}`, `{"size": "small"}`},
		{"no schema: nothing", `{"service_binding": {"create": {"parameters": ` + schema + `}}}`,
			`{"size": "large"}`, `{}`},
		{"parameters that are no object: nothing", `{"service_instance": {"create": {"parameters": ` + schema + `}}}`,
			`[1, 2]`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Name: "p", Schemas: &apiextensionsv1.JSON{Raw: []byte(tc.schemas)}}}
			got, err := ChartValues(plan, json.RawMessage(tc.params), InstanceCreate, InstanceUpdate)
			require.NoError(t, err)
			raw, err := json.Marshal(got)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(raw))
		})
	}

	t.Run("a values path that is no path is the plan's error", func(t *testing.T) {
		plan := &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Name: "p", Schemas: &apiextensionsv1.JSON{Raw: []byte(
			`{"service_instance": {"create": {"parameters": {"properties": {"s": {"x-quartermaster-values-path": "a..b"}}}}}}`)}}}
		_, err := ChartValues(plan, json.RawMessage(`{"s": 1}`), InstanceCreate)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `x-quartermaster-values-path of s is a..b, not a dotted path`)
	})
	t.Run("no plan schemas at all: nothing", func(t *testing.T) {
		got, err := ChartValues(&osbv1alpha1.SFPlan{}, json.RawMessage(`{"size": "large"}`), InstanceCreate)
		require.NoError(t, err)
		assert.Empty(t, got)
	})
}
