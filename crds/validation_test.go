package crds_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestValidationRejectsBadResources checks that the rules the seeds state are
// enforced by the API server, with messages that point at the field.
func TestValidationRejectsBadResources(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)

	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "health check every 0 minutes",
			yaml: registeredService(`
  healthcheck:
    container:
      image: alpine
      minutes: 0`, `
  - name: port
    value: "5432"`),
			want: []string{"spec.healthcheck.container.minutes", "should be greater than or equal to 1"},
		},
		{
			name: "endpoint definition with both a value and a secret",
			yaml: registeredService("", `
  - name: password
    value: hunter2
    valueFromSecret:
      name: db
      key: password`),
			want: []string{"spec.serviceEndpointDefinition[0]", "exactly one of value or valueFromSecret must be set"},
		},
		{
			name: "health check of two kinds",
			yaml: registeredService(`
  healthcheck:
    tcp: {host: db, port: 5432}
    http: {url: "http://db/healthz"}`, `
  - {name: port, value: "5432"}`),
			want: []string{"spec.healthcheck", "give exactly one kind of check: container, tcp or http"},
		},
		{
			name: "health check of no kind",
			yaml: registeredService(`
  healthcheck: {failureThreshold: 3}`, `
  - {name: port, value: "5432"}`),
			want: []string{"spec.healthcheck", "give exactly one kind of check: container, tcp or http"},
		},
		{
			name: "tcp check without a host",
			yaml: registeredService(`
  healthcheck:
    tcp: {port: 5432, fromEndpoint: {port: port}}`, `
  - {name: port, value: "5432"}`),
			want: []string{"spec.healthcheck.tcp", "give host, or fromEndpoint.host"},
		},
		{
			name: "http check with a url and one from the endpoint",
			yaml: registeredService(`
  healthcheck:
    http: {url: "https://db/healthz", fromEndpoint: {url: url}}`, `
  - {name: url, value: "https://db/healthz"}`),
			want: []string{"spec.healthcheck.http", "give exactly one of url or fromEndpoint"},
		},
		{
			name: "endpoint definition with neither a value nor a secret",
			yaml: registeredService("", `
  - name: password`),
			want: []string{"spec.serviceEndpointDefinition[0]", "exactly one of value or valueFromSecret must be set"},
		},
		{
			name: "registered service without a class identity",
			yaml: `
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: no-identity}
spec:
  serviceEndpointDefinition:
  - {name: port, value: "5432"}`,
			want: []string{"spec.serviceClassIdentity", "Required value"},
		},
		{
			name: "environment constraint with a doubled exclusion",
			yaml: registeredService(`
  constraints:
    environments: ["!!prod"]`, `
  - {name: port, value: "5432"}`),
			want: []string{"spec.constraints.environments[0]", "should match"},
		},
		{
			name: "plan template with an unknown action",
			yaml: plan(`
  - action: destroy
    type: gotemplate
    content: "{}"`),
			want: []string{"spec.templates[0].action", `Unsupported value: "destroy"`, `"provision"`, `"clusterSelector"`},
		},
		{
			name: "plan template of an unknown type",
			yaml: plan(`
  - action: provision
    type: jsonnet
    content: "{}"`),
			want: []string{"spec.templates[0].type", `Unsupported value: "jsonnet"`},
		},
		{
			name: "plan template with both a url and content",
			yaml: plan(`
  - action: provision
    type: gotemplate
    url: https://example.com/t.yaml
    content: "{}"`),
			want: []string{"spec.templates[0]", "exactly one of url, content or contentEncoded must be set"},
		},
		{
			name: "plan template without a body",
			yaml: plan(`
  - action: provision
    type: gotemplate`),
			want: []string{"spec.templates[0]", "exactly one of url, content or contentEncoded must be set"},
		},
		{
			name: "plan template fetched over ftp",
			yaml: plan(`
  - action: provision
    type: helm
    url: ftp://example.com/chart.tgz`),
			want: []string{"spec.templates[0].url", "should match '^https?://'"},
		},
		{
			name: "plan without a service",
			yaml: `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: orphan}
spec: {name: orphan, id: orphan, description: d}`,
			want: []string{"spec.serviceId", "Required value"},
		},
		{
			name: "usage kind without a resource version",
			yaml: `
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: versionless}
spec:
  labelsPath: spec.template.metadata.labels
  resource: {group: apps, kind: Deployment}`,
			want: []string{"spec.resource.version", "Required value"},
		},
		{
			name: "usage kind whose labelsPath is not a labels map",
			yaml: `
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: not-labels}
spec:
  labelsPath: spec.template.metadata
  resource: {group: apps, kind: Deployment, version: v1}`,
			want: []string{"spec.labelsPath", "labelsPath is a dot-separated path that ends in .labels, e.g. spec.template.metadata.labels"},
		},
		{
			name: "usage kind whose containersPath is not containers",
			yaml: `
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: not-containers}
spec:
  labelsPath: spec.template.metadata.labels
  containersPath: spec.template.spec[0]
  resource: {group: apps, kind: Deployment, version: v1}`,
			want: []string{"spec.containersPath", "containersPath is a dot-separated path that ends in .containers"},
		},
		{
			name: "usage of a binding of an unknown kind",
			yaml: `
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: unknown-binding-kind}
spec:
  serviceBindingRef: {kind: ConfigMap, name: db}
  usedBy: {kind: deployment, name: web}`,
			want: []string{"spec.serviceBindingRef.kind", `supported values: "SFServiceBinding", "ServiceClaim"`},
		},
		{
			name: "claim naming its application both by name and by selector",
			yaml: `
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: both}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  application:
    apiVersion: apps/v1
    kind: Deployment
    name: app
    selector: {matchLabels: {app: app}}`,
			want: []string{"spec.application", "exactly one of name or selector must be set"},
		},
		{
			name: "claim from no environment",
			yaml: `
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: nowhere}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]`,
			want: []string{"spec", "give exactly one of target (as Primaza ships it), environmentTag or applicationClusterContext (as the seed's design has them)"},
		},
		{
			name: "claim from an environment and a cluster context",
			yaml: `
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: twice}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev
  applicationClusterContext: {clusterEnvironmentName: dev, namespace: apps}`,
			want: []string{"spec", "give exactly one of target (as Primaza ships it), environmentTag or applicationClusterContext (as the seed's design has them)"},
		},
		{
			name: "claim from a target of both shapes",
			yaml: `
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: both-targets}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  target: {environmentTag: dev, applicationClusterContext: {clusterEnvironmentName: dev, namespace: apps}}`,
			want: []string{"spec.target", "target: give exactly one of environmentTag or applicationClusterContext"},
		},
		{
			name: "rotation whose overlap outlasts its period",
			yaml: `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: long-overlap}
spec: {id: b, instanceId: i, serviceId: s, planId: p, rotation: {every: 1h, keepFor: 2h}}`,
			want: []string{"spec.rotation", "keepFor must be shorter than every: at most two sets of credentials are valid at once"},
		},
		{
			name: "rotation more often than every 10s",
			yaml: `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: hasty}
spec: {id: b, instanceId: i, serviceId: s, planId: p, rotation: {every: 5s, keepFor: 1s}}`,
			want: []string{"spec.rotation", "every must be at least 10s"},
		},
		{
			name: "a plan's binding rotation without bindingRotatable",
			yaml: `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: unrotatable}
spec: {name: p, id: p, description: d, serviceId: s, bindingRotation: {every: 1h, keepFor: 1m}}`,
			want: []string{"bindingRotation needs bindingRotatable: true"},
		},
		{
			name: "instance without a plan",
			yaml: `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceInstance
metadata: {name: planless}
spec: {serviceId: s}`,
			want: []string{"spec.planId", "Required value"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decode(t, tc.yaml)
			if namespaced, _ := kube.Client.IsObjectNamespaced(obj); namespaced {
				obj.SetNamespace(ns)
			}
			err := kube.Client.Create(context.Background(), obj)
			require.Error(t, err, "the API server accepted a bad %s", obj.GetKind())
			require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestClaimIdentityAndKeysAreImmutable: as in Primaza, a claim's class
// identity and endpoint keys cannot change once set; its environment can.
func TestClaimIdentityAndKeysAreImmutable(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	claim := decode(t, `
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: fixed}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev`)
	claim.SetNamespace(ns)
	require.NoError(t, kube.Client.Create(ctx, claim))
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"serviceClassIdentity", []any{map[string]any{"name": "type", "value": "mysql"}}, "serviceClassIdentity cannot be changed"},
		{"serviceEndpointDefinitionKeys", []any{"host", "port"}, "serviceEndpointDefinitionKeys cannot be changed"},
	} {
		changed := claim.DeepCopy()
		require.NoError(t, unstructured.SetNestedField(changed.Object, tc.value, "spec", tc.field))
		err := kube.Client.Update(ctx, changed)
		require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
		assert.Contains(t, err.Error(), tc.want)
	}
	require.NoError(t, unstructured.SetNestedField(claim.Object, "stage", "spec", "environmentTag"))
	assert.NoError(t, kube.Client.Update(ctx, claim), "the environment can change")
}

// TestRotationIsSetWhenTheBindingIsMade: a binding's spec.rotation cannot
// be added or removed later (a rotating binding publishes successors'
// credentials, one without a policy holds its own); its values can change.
func TestRotationIsSetWhenTheBindingIsMade(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	const refused = "spec.rotation is set when the binding is made, or never"
	plain := decode(t, `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: plain}
spec: {id: plain, instanceId: i, serviceId: s, planId: p}`)
	plain.SetNamespace(ns)
	require.NoError(t, kube.Client.Create(ctx, plain))
	require.NoError(t, unstructured.SetNestedMap(plain.Object, map[string]any{"every": "1h", "keepFor": "1m"}, "spec", "rotation"))
	err := kube.Client.Update(ctx, plain)
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	assert.Contains(t, err.Error(), refused)

	rotating := decode(t, `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: rotating}
spec: {id: rotating, instanceId: i, serviceId: s, planId: p, rotation: {every: 1h, keepFor: 1m}}`)
	rotating.SetNamespace(ns)
	require.NoError(t, kube.Client.Create(ctx, rotating))
	require.NoError(t, unstructured.SetNestedField(rotating.Object, "2h", "spec", "rotation", "every"))
	require.NoError(t, kube.Client.Update(ctx, rotating), "the policy's values can change")
	unstructured.RemoveNestedField(rotating.Object, "spec", "rotation")
	err = kube.Client.Update(ctx, rotating)
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	assert.Contains(t, err.Error(), refused)
}

func registeredService(extraSpec, endpoints string) string {
	return `
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {generateName: bad-}
spec:
  serviceClassIdentity:
  - {name: type, value: psqlserver}
  serviceEndpointDefinition:` + endpoints + extraSpec
}

func plan(templates string) string {
	return `
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {generateName: bad-}
spec:
  name: bad
  id: bad
  description: a plan the API server must refuse
  serviceId: svc
  templates:` + templates
}

// readObjects decodes every YAML document of a file; a document of comments only is skipped.
