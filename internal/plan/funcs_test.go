package plan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
)

func TestFuncs(t *testing.T) {
	cases := []struct {
		name, tmpl, want string
	}{
		{"b64 round trip", `{{ "hunter2" | b64enc | b64dec }}`, "hunter2"},
		{"toJson", `{{ dict "a" 1 "b" (list "x") | toJson }}`, `{"a":1,"b":["x"]}`},
		{"marshalJSON is toJson", `{{ dict "a" true | marshalJSON }}`, `{"a":true}`},
		{"fromJson", `{{ (fromJson "{\"user\":\"u\"}").user }}`, "u"},
		{"unmarshalJSON is fromJson", `{{ index (unmarshalJSON "[1,2]") 1 }}`, "2"},
		{"toYaml trims the last newline", `{{ dict "a" (list 1 2) | toYaml }}`, "a:\n- 1\n- 2"},
		{"fromYaml", `{{ (fromYaml "port: 5432").port }}`, "5432"},
		{"toToml", `{{ dict "port" 5432 | toToml }}`, "port = 5432\n"},
		{"sprig is there", `{{ "abc" | upper | repeat 2 }}`, "ABCABC"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := plan.Go(tc.name, tc.tmpl, nil, plan.FuncMap(), plan.Bounds{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFuncErrorsFailTheRender(t *testing.T) {
	cases := []struct {
		name, tmpl, want string
	}{
		{"bad base64", `{{ b64dec "not base64!" }}`, "b64dec: illegal base64 data"},
		{"bad JSON", "line one\n{{ fromJson \"{nope\" }}", `template: bad JSON:2:3: executing "bad JSON" at <fromJson "{nope">: error calling fromJson: fromJson: invalid character 'n'`},
		{"bad YAML", `{{ fromYaml "a: [" }}`, "fromYaml:"},
		{"env is removed", `{{ env "HOME" }}`, `function "env" not defined`},
		{"expandenv is removed", `{{ expandenv "$HOME" }}`, `function "expandenv" not defined`},
		{"no DNS from a template", `{{ getHostByName "example.com" }}`, `function "getHostByName" not defined`},
		{"fail", `{{ if not .plan }}{{ fail "plan.context.size is required" }}{{ end }}`, "plan.context.size is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.Go(tc.name, tc.tmpl, nil, plan.FuncMap(), plan.Bounds{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestObjects(t *testing.T) {
	t.Run("several documents, a separator inside a block scalar is content", func(t *testing.T) {
		objs, err := plan.Objects(`
---
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
data:
  script: |
    echo start
    ---
    echo end
---
# only a comment
---
apiVersion: v1
kind: Secret
metadata: {name: two}
stringData: {replicas: "3"}
`)
		require.NoError(t, err)
		require.Len(t, objs, 2)
		assert.Equal(t, "one", objs[0].GetName())
		assert.Equal(t, "echo start\n---\necho end\n", objs[0].Object["data"].(map[string]any)["script"])
		assert.Equal(t, "Secret", objs[1].GetKind())
	})

	t.Run("integers stay integers", func(t *testing.T) {
		objs, err := plan.Objects("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q}\nspec: {replicas: 3, ratio: 0.5}\n")
		require.NoError(t, err)
		spec := objs[0].Object["spec"].(map[string]any)
		assert.Equal(t, int64(3), spec["replicas"])
		assert.InDelta(t, 0.5, spec["ratio"], 0)
	})

	for _, tc := range []struct{ name, doc, want string }{
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "rendered document 1: object has no kind"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\n", "rendered document 1: ConfigMap has no metadata.name"},
		{"not an object", "- a\n- b\n", "rendered document 1: want a Kubernetes object"},
		{"not YAML", "a: b\n c: [\n", "rendered document 1 is not YAML"},
		{"second document bad", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\n", "rendered document 2: object has no apiVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.Objects(tc.doc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCheck(t *testing.T) {
	planOf := func(templates ...osbv1alpha1.TemplateSpec) *osbv1alpha1.SFPlan {
		return &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Templates: templates}}
	}
	good := osbv1alpha1.TemplateSpec{Action: "provision", Type: "gotemplate", Content: `{{ generatePassword "p" 8 }}`}
	require.NoError(t, plan.Check(planOf(good)))

	for _, tc := range []struct {
		name string
		plan *osbv1alpha1.SFPlan
		want string
	}{
		{"parse error with its line", planOf(osbv1alpha1.TemplateSpec{Action: "status", Type: "gotemplate", Content: "a: b\n{{ if }}"}), "status template: template: status:2: missing value for if"},
		{"two templates for one action", planOf(good, good), "two templates for action provision"},
		{"not base64", planOf(osbv1alpha1.TemplateSpec{Action: "bind", Type: "gotemplate", ContentEncoded: "%%%"}), "bind template: contentEncoded is not base64"},
		{"a chart that is not one", planOf(osbv1alpha1.TemplateSpec{Action: "provision", Type: "helm", ContentEncoded: "aGVsbG8="}), "provision template: loading the helm chart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plan.Check(tc.plan)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestDecodeBindResponse(t *testing.T) {
	got, err := plan.DecodeBindResponse(map[string]any{
		"credentials":       map[string]any{"user": "u"},
		"endpoints":         []any{map[string]any{"host": "db.example", "ports": []any{"5432", "9000-9010"}, "protocol": "tcp"}},
		"volume_mounts":     []any{map[string]any{"driver": "nfs", "container_dir": "/data"}},
		"syslog_drain_url":  "syslog://logs.example:514",
		"route_service_url": "https://route.example",
		"metadata":          map[string]any{"expires_at": "2027-01-01T00:00:00Z", "renew_before": "2026-12-01T00:00:00Z"},
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"user": "u"}, got.Credentials)
	assert.Equal(t, []osbv1alpha1.BindingEndpoint{{Host: "db.example", Ports: []string{"5432", "9000-9010"}, Protocol: "tcp"}}, got.Endpoints)
	assert.JSONEq(t, `[{"driver": "nfs", "container_dir": "/data"}]`, string(got.VolumeMounts))
	assert.Equal(t, "syslog://logs.example:514", got.SyslogDrainURL)
	assert.Equal(t, "https://route.example", got.RouteServiceURL)
	assert.Equal(t, &osbv1alpha1.BindingMetadata{ExpiresAt: "2027-01-01T00:00:00Z", RenewBefore: "2026-12-01T00:00:00Z"}, got.Metadata)

	none, err := plan.DecodeBindResponse(nil)
	require.NoError(t, err)
	assert.Equal(t, &plan.BindResponse{}, none)

	// The inter-operator's templates write the response as a JSON string.
	quoted, err := plan.DecodeBindResponse(`{"credentials": {"user": "u"}}`)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"user": "u"}, quoted.Credentials)

	for _, tc := range []struct {
		name     string
		response any
		want     string
	}{
		{"a string that is not JSON", "Service Instance d-1 creation successful",
			"status template: bind.response: not a JSON object: invalid character 'S' looking for beginning of value"},
		{"a list", []any{"a"}, "status template: bind.response: want an object or a JSON string, got a list"},
		{"a port that is a number", map[string]any{"endpoints": []any{map[string]any{"host": "h", "ports": []any{5432}}}},
			"status template: bind.response: endpoints.ports must be a string, not number"},
		{"an endpoint without a host", map[string]any{"endpoints": []any{map[string]any{"ports": []any{"1"}}}},
			"status template: bind.response: endpoints[0] needs a host and ports"},
		{"credentials that are not an object", map[string]any{"credentials": "secret"},
			"status template: bind.response: credentials must be an object, not string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.DecodeBindResponse(tc.response)
			var te *plan.TemplateError
			require.ErrorAs(t, err, &te, "a template error: the same render fails again")
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
