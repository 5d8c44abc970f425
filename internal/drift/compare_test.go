package drift

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func object(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: kv-1, namespace: shop, labels: {app: kv}}
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: kv
        image: kv:1
        resources: {requests: {cpu: 500m, memory: 1Gi}}
        args: [--port, "80"]
`

func TestCompare(t *testing.T) {
	cases := []struct {
		name, applied, live string
		missing             bool
		fields              []string
	}{
		{name: "the same", applied: deployment, live: deployment},
		{name: "defaults and others' fields are not drift", applied: deployment, live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: kv-1, namespace: shop, labels: {app: kv, team: a}, resourceVersion: "7", annotations: {x: y}}
spec:
  replicas: 2
  strategy: {type: RollingUpdate}
  template:
    spec:
      containers:
      - {name: sidecar, image: proxy}
      - name: kv
        image: kv:1
        imagePullPolicy: IfNotPresent
        resources: {requests: {cpu: "0.5", memory: 1073741824}}
        args: [--port, "80"]
status: {replicas: 2}
`},
		{name: "replicas edited", applied: deployment, live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: kv-1, namespace: shop, labels: {app: kv}}
spec:
  replicas: 0
  template:
    spec:
      containers:
      - name: kv
        image: kv:2
        resources: {requests: {cpu: 500m, memory: 1Gi}}
        args: [--port]
`, fields: []string{"spec.replicas", "spec.template.spec.containers[name=kv].args", "spec.template.spec.containers[name=kv].image"}},
		{name: "a label and a container removed", applied: deployment, live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: kv-1, namespace: shop}
spec:
  replicas: 2
  template:
    spec:
      containers:
      - {name: other}
`, fields: []string{"metadata.labels", "spec.template.spec.containers[name=kv]"}},
		{name: "an empty map the server leaves out", applied: "{kind: ConfigMap, metadata: {name: c}, data: {}}", live: "{kind: ConfigMap, metadata: {name: c}}"},
		{name: "a positional list", applied: "{kind: X, metadata: {name: x}, spec: {hosts: [a, b]}}", live: "{kind: X, metadata: {name: x}, spec: {hosts: [a, c]}}",
			fields: []string{"spec.hosts[1]"}},
		{name: "a server field is never drift", applied: "{kind: X, metadata: {name: x, resourceVersion: \"1\"}, status: {a: 1}}", live: "{kind: X, metadata: {name: x, resourceVersion: \"2\"}, status: {a: 2}}"},
		{name: "missing", applied: deployment, missing: true},
		// "cHc=" is "pw", "dXNlcg==" "user", "b3RoZXI=" "other".
		{name: "a Secret's stringData as the server keeps it, in data", applied: "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {password: pw}, data: {user: dXNlcg==}}",
			live: "{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {password: cHc=, user: dXNlcg==}, type: Opaque}"},
		{name: "stringData wins over data, as on the server", applied: "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {password: pw}, data: {password: b3RoZXI=}}",
			live: "{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {password: cHc=}}"},
		{name: "a Secret's value changed", applied: "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {password: pw}}",
			live: "{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {password: b3RoZXI=}}", fields: []string{"data.password"}},
		{name: "a Secret's key removed", applied: "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {password: pw}}",
			live: "{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {}}", fields: []string{"data.password"}},
		{name: "another kind's stringData is compared as it is", applied: "{apiVersion: example.com/v1, kind: Secret, metadata: {name: s}, stringData: {a: b}}",
			live: "{apiVersion: example.com/v1, kind: Secret, metadata: {name: s}, data: {a: Yg==}}", fields: []string{"stringData"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var live *unstructured.Unstructured
			if c.live != "" {
				live = object(t, c.live)
			}
			f, drifted := Compare(object(t, c.applied), live)
			assert.Equal(t, c.missing || len(c.fields) > 0, drifted)
			assert.Equal(t, c.missing, f.Missing)
			assert.Equal(t, c.fields, f.Fields)
		})
	}
}

func TestDescribe(t *testing.T) {
	many := make([]string, 12)
	for i := range many {
		many[i] = "data.k" + string(rune('a'+i))
	}
	assert.Equal(t, "Deployment shop/kv-1: spec.replicas changed; Service shop/kv-1: deleted",
		Describe([]Finding{{Object: "Deployment shop/kv-1", Fields: []string{"spec.replicas"}}, {Object: "Service shop/kv-1", Missing: true}}))
	assert.Equal(t, "ConfigMap c: data.ka, data.kb, data.kc, data.kd, data.ke, data.kf, data.kg, data.kh, data.ki, data.kj changed and 2 more fields",
		Describe([]Finding{{Object: "ConfigMap c", Fields: many}}))
}
