package bindingusage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
)

func object(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(y), &u.Object))
	return u
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec:
  template:
    spec:
      containers:
      - name: app
        env: [{name: MODE, value: prod}]
      - name: sidecar
`

func TestContainersPath(t *testing.T) {
	for _, tc := range []struct{ name, obj, configured, want, err string }{
		{"pod template", deployment, "", "spec.template.spec.containers", ""},
		{"job template", "kind: CronJob\nspec: {jobTemplate: {spec: {template: {spec: {}}}}}", "", "spec.jobTemplate.spec.template.spec.containers", ""},
		{"configured wins", deployment, "spec.deployment.spec.template.spec.containers", "spec.deployment.spec.template.spec.containers", ""},
		{"no template", "kind: Function\nspec: {deployment: {}}", "", "", "containersPath (default): no pod template at spec.template or spec.jobTemplate.spec.template; set the UsageKind's containersPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ContainersPath(object(t, tc.obj), tc.configured)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPathsThatAreNotAPodTemplate(t *testing.T) {
	for _, tc := range []struct{ name, obj, labels, containers, err string }{
		{"missing container list", deployment, "spec.template.metadata.labels", "spec.templat.spec.containers",
			"containersPath spec.templat.spec.containers: spec.templat is not in Deployment web"},
		{"containers not a list", "kind: X\nmetadata: {name: x}\nspec: {template: {spec: {containers: {app: {}}}}}", "spec.template.metadata.labels", "spec.template.spec.containers",
			"containersPath spec.template.spec.containers: is a map[string]interface {}, not a list of containers"},
		{"a container without a name", "kind: X\nspec: {template: {spec: {containers: [{image: x}]}}}", "spec.template.metadata.labels", "spec.template.spec.containers",
			"containersPath spec.template.spec.containers: item 0 is not a container with a name"},
		{"empty containers", "kind: X\nspec: {template: {spec: {containers: []}}}", "spec.template.metadata.labels", "spec.template.spec.containers",
			"containersPath spec.template.spec.containers: lists no container"},
		{"labels under a missing template", deployment, "spec.pod.metadata.labels", "spec.template.spec.containers",
			"labelsPath spec.pod.metadata.labels: spec.pod is not in Deployment web"},
		{"labels through a string", "kind: X\nspec: {template: hello}", "spec.template.metadata.labels", "spec.template.spec.containers",
			"labelsPath spec.template.metadata.labels: spec.template is a string, not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Injection{Usage: "u", Secret: "s", Keys: []string{"k"}}.Apply(object(t, tc.obj), Paths{Labels: tc.labels, Containers: tc.containers})
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.EqualError(t, err, tc.err)
		})
	}
}

func TestApplyInjectsOnlyWhatTheUsageOwns(t *testing.T) {
	in := Injection{Usage: "web-db", Binding: "db", Secret: "creds", Keys: []string{"password", "user"}, Hash: "abc", EnvPrefix: "DB_"}
	u, env, err := in.Apply(object(t, deployment), Paths{Labels: "spec.template.metadata.labels", Containers: "spec.template.spec.containers"})
	require.NoError(t, err)
	assert.Equal(t, []string{"DB_password", "DB_user"}, env)
	got, err := yaml.Marshal(u.Object)
	require.NoError(t, err)
	assert.YAMLEq(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec:
  template:
    metadata:
      labels: {use.quartermaster.io/web-db: "true"}
      annotations: {binding-hash.quartermaster.io/web-db: abc}
    spec:
      containers:
      - name: app
        env:
        - {name: DB_password, valueFrom: {secretKeyRef: {name: creds, key: password}}}
        - {name: DB_user, valueFrom: {secretKeyRef: {name: creds, key: user}}}
      - name: sidecar
        env:
        - {name: DB_password, valueFrom: {secretKeyRef: {name: creds, key: password}}}
        - {name: DB_user, valueFrom: {secretKeyRef: {name: creds, key: user}}}
`, string(got), "the user's MODE is not in it: the usage's field manager owns only its own fields")
}

func TestApplyVolume(t *testing.T) {
	obj := object(t, deployment)
	in := Injection{Usage: "web-db", Binding: "db", Secret: "creds", Keys: []string{"type", "uri"}, Hash: "abc", Volume: true, Type: "redis", Provider: "quartermaster"}
	// The sidecar sets its own root.
	require.NoError(t, unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"name": "app"}, map[string]any{"name": "sidecar",
		"env": []any{map[string]any{"name": BindingRootEnv, "value": "/srv/bindings"}}}}, "spec", "template", "spec", "containers"))
	u, env, err := in.Apply(obj, Paths{Labels: "spec.template.metadata.labels", Containers: "spec.template.spec.containers"})
	require.NoError(t, err)
	assert.Equal(t, []string{"type", "uri", BindingRootEnv}, env)
	got, err := yaml.Marshal(u.Object["spec"])
	require.NoError(t, err)
	assert.YAMLEq(t, `
template:
  metadata:
    labels: {use.quartermaster.io/web-db: "true"}
    annotations: {binding-hash.quartermaster.io/web-db: abc, binding-provider.quartermaster.io/web-db: quartermaster}
  spec:
    containers:
    - name: app
      env:
      - {name: type, valueFrom: {secretKeyRef: {name: creds, key: type}}}
      - {name: uri, valueFrom: {secretKeyRef: {name: creds, key: uri}}}
      - {name: SERVICE_BINDING_ROOT, value: /bindings}
      volumeMounts: [{name: qm-web-db, mountPath: /bindings/db, readOnly: true}]
    - name: sidecar
      env:
      - {name: type, valueFrom: {secretKeyRef: {name: creds, key: type}}}
      - {name: uri, valueFrom: {secretKeyRef: {name: creds, key: uri}}}
      volumeMounts: [{name: qm-web-db, mountPath: /srv/bindings/db, readOnly: true}]
    volumes:
    - name: qm-web-db
      projected:
        sources:
        - secret: {name: creds}
        - downwardAPI:
            items:
            - {path: provider, fieldRef: {fieldPath: "metadata.annotations['binding-provider.quartermaster.io/web-db']"}}
`, string(got), "type comes from the Secret, provider from an annotation")
}

func TestApplyNeverOverwritesTheUsersFields(t *testing.T) {
	paths := Paths{Labels: "spec.template.metadata.labels", Containers: "spec.template.spec.containers"}
	for _, tc := range []struct{ name, containers, volumes, err string }{
		{"a variable of the same name", "[{name: app, env: [{name: DB_user, value: mine}]}]", "",
			`container "app" already has the environment variable DB_user, set by someone else; Quartermaster never overwrites it (choose another envPrefix, or remove it)`},
		{"a variable from another Secret", "[{name: app, env: [{name: DB_user, valueFrom: {secretKeyRef: {name: other, key: user}}}]}]", "",
			`container "app" already has the environment variable DB_user, set by someone else; Quartermaster never overwrites it (choose another envPrefix, or remove it)`},
		{"a mount at the same path", "[{name: app, volumeMounts: [{name: data, mountPath: /bindings/db}]}]", "",
			`container "app" already has a volume mounted at /bindings/db, set by someone else; Quartermaster never overwrites it (choose another envPrefix, or remove it)`},
		{"a volume of the same name", "[{name: app}]", "[{name: qm-web-db, emptyDir: {}}]",
			`container "(pod)" already has a volume named qm-web-db, set by someone else; Quartermaster never overwrites it (choose another envPrefix, or remove it)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: " + tc.containers
			if tc.volumes != "" {
				y += ", volumes: " + tc.volumes
			}
			in := Injection{Usage: "web-db", Binding: "db", Secret: "creds", Keys: []string{"user"}, EnvPrefix: "DB_", Volume: true}
			_, _, err := in.Apply(object(t, y+"}}}"), paths)
			var ce *ConflictError
			require.ErrorAs(t, err, &ce)
			assert.EqualError(t, err, tc.err)
		})
	}
	// Its own earlier injection is no conflict.
	in := Injection{Usage: "web-db", Secret: "creds", Keys: []string{"user"}, EnvPrefix: "DB_"}
	_, _, err := in.Apply(object(t, "kind: Deployment\nspec: {template: {spec: {containers: [{name: app, env: [{name: DB_user, valueFrom: {secretKeyRef: {name: creds, key: user}}}]}]}}}"), paths)
	assert.NoError(t, err)
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 70) + ".b"
	for _, name := range []string{LabelKey(long), HashKey(long)} {
		_, n, _ := strings.Cut(name, "/")
		assert.LessOrEqual(t, len(n), 63, name)
	}
	assert.NotEqual(t, LabelKey(long), LabelKey(long+"c"), "bounded names stay apart")
	assert.Len(t, VolumeName(long), 63)
	assert.NotContains(t, VolumeName("a.b"), ".", "a volume's name is a DNS label")
	assert.Equal(t, "qm-usage-1234", FieldManager("1234"))
}

func TestHash(t *testing.T) {
	a := Hash(map[string][]byte{"user": []byte("u"), "password": []byte("p")})
	assert.Equal(t, a, Hash(map[string][]byte{"password": []byte("p"), "user": []byte("u")}), "order does not matter")
	assert.NotEqual(t, a, Hash(map[string][]byte{"user": []byte("u"), "password": []byte("q")}))
	assert.NotEqual(t, Hash(map[string][]byte{"ab": []byte("c")}), Hash(map[string][]byte{"a": []byte("bc")}))
	assert.Len(t, a, 16)
}

func TestResolve(t *testing.T) {
	apps := schema.GroupVersion{Group: "apps", Version: "v1"}
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{apps})
	m.Add(apps.WithKind("Deployment"), meta.RESTScopeNamespace)
	for _, tc := range []struct {
		name string
		ref  sc.ResourceReference
		err  string
	}{
		{"exact kind", sc.ResourceReference{Group: "apps", Version: "v1", Kind: "Deployment"}, ""},
		{"Kyma's lower case", sc.ResourceReference{Group: "apps", Version: "v1", Kind: "deployment"}, ""},
		{"the plural", sc.ResourceReference{Group: "apps", Version: "v1", Kind: "deployments"}, ""},
		{"an old version", sc.ResourceReference{Group: "apps", Version: "v1beta1", Kind: "deployment"}, "apps/v1beta1 Deployment is not served; it is served in v1"},
		{"unknown", sc.ResourceReference{Group: "kubeless.io", Version: "v1beta1", Kind: "function"}, "the API server serves no kind function in kubeless.io/v1beta1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(m, tc.ref)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, apps.WithKind("Deployment"), got.GroupVersionKind)
			assert.Equal(t, "deployments", got.Resource.Resource)
		})
	}
}
