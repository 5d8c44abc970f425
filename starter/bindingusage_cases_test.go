package starter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

func readyMessage(u *sc.ServiceBindingUsage) string {
	return meta.FindStatusCondition(u.Status.Conditions, "Ready").Message
}

func getKind(c require.TestingT, s *testenv.System, name string) *sc.UsageKind {
	var k sc.UsageKind
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Name: name}, &k))
	return &k
}

// TestUsageWaitsForWhatIsMissing: a usage naming an unknown kind, a
// missing workload or a missing binding is Pending and says which; it is
// injected as soon as that thing appears. A kind that is not served, or a
// path that is not a pod template, says so.
func TestUsageWaitsForWhatIsMissing(t *testing.T) {
	s, _ := usageSystem(t, false)
	kind := s.Namespace + "-deployment"

	createUsage(t, s, "web-db", kind, "web", "{name: db}", "")
	u := waitUsage(t, s, "web-db", sc.UsagePending, "UsageKindNotFound")
	assert.Equal(t, fmt.Sprintf("there is no UsageKind %q (kubectl get usagekinds lists them)", kind), readyMessage(u))

	usageKind(t, s, "deployment", deploymentKind)
	u = waitUsage(t, s, "web-db", sc.UsagePending, "WorkloadNotFound")
	assert.Equal(t, "Deployment web does not exist in namespace "+s.Namespace, readyMessage(u))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		k := getKind(c, s, kind)
		assert.True(c, meta.IsStatusConditionTrue(k.Status.Conditions, "Ready"))
		assert.Equal(c, "deployments.apps", k.Status.Resource)
		assert.Equal(c, 1, k.Status.Usages)
	}, 15*time.Second, 50*time.Millisecond, "the UsageKind is Ready")

	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	waitUsage(t, s, "web-db", sc.UsageReady, "Injected")

	createUsage(t, s, "web-late", kind, "web", "{name: late}", "{envPrefix: {name: LATE_}}")
	u = waitUsage(t, s, "web-late", sc.UsagePending, "BindingNotFound")
	assert.Equal(t, "there is no SFServiceBinding late", readyMessage(u))
	s.Bind("late", "db", s.Namespace+"-instant")
	waitUsage(t, s, "web-late", sc.UsageReady, "Injected")
	assert.Contains(t, getDeployment(t, s, "web").Spec.Template.Spec.Containers[0].Env[1:], corev1.EnvVar{Name: "LATE_user",
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "qm-credentials-late"}, Key: "user"}}})

	old := usageKind(t, s, "old-deployment", "  resource: {group: apps, kind: deployment, version: v1beta1}\n  labelsPath: spec.template.metadata.labels")
	createUsage(t, s, "web-old", old, "web", "{name: db}", "")
	u = waitUsage(t, s, "web-old", sc.UsagePending, "KindNotServed")
	assert.Equal(t, fmt.Sprintf("UsageKind %s: apps/v1beta1 Deployment is not served; it is served in v1", old), readyMessage(u))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ready := meta.FindStatusCondition(getKind(c, s, old).Status.Conditions, "Ready")
		require.NotNil(c, ready)
		assert.Equal(c, "NotServed", ready.Reason)
	}, 15*time.Second, 50*time.Millisecond, "the UsageKind says it is not served")

	typo := usageKind(t, s, "typo", "  resource: {group: apps, kind: Deployment, version: v1}\n  labelsPath: spec.template.metadata.labels\n  containersPath: spec.templat.spec.containers")
	createUsage(t, s, "web-typo", typo, "web", "{name: db}", "")
	u = waitUsage(t, s, "web-typo", sc.UsageFailed, "InvalidPath")
	assert.Equal(t, "Deployment web: containersPath spec.templat.spec.containers: spec.templat is not in Deployment web", readyMessage(u))
}

// TestKymaDeletionScenario runs the deletion scenario of Kyma's design,
// steps 1 to 8: a UsageKind deleted while a usage names it stays until
// that usage is gone, and the usage removes its injection first.
//
// A second Quartermaster runs beside it, watching another namespace only
// (docs/install.md, "Two Quartermasters on one cluster"): it sees none of
// the kind's usages, and leaves the kind's count and protection to the
// first, which sees them all.
func TestKymaDeletionScenario(t *testing.T) {
	s, _ := usageSystem(t, false)
	ctx := context.Background()
	other, err := system.Start(ctx, system.Options{Kube: s.Kube.Config, Catalog: s.Catalog(), Temporal: testenv.Temporal(t),
		Watcher: &starter.WatcherOptions{Namespaces: []string{s.Namespace + "-other"}}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, other.Stop()) })
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	original := getDeployment(t, s, "web").Spec.Template

	// 1. A UsageKind and a Ready usage, each with its finalizer.
	kind := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "deploy-redis-client", kind, "web", "{name: db}", "")
	u := waitUsage(t, s, "deploy-redis-client", sc.UsageReady, "Injected")
	assert.True(t, controllerutil.ContainsFinalizer(u, sc.UsageProtection))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, controllerutil.ContainsFinalizer(getKind(c, s, kind), sc.UsageKindProtection))
	}, 15*time.Second, 50*time.Millisecond, "the UsageKind is protected")

	// 2, 3. The administrator deletes the UsageKind: it stays, in use.
	require.NoError(t, s.Kube.Client.Delete(ctx, getKind(t, s, kind)))
	assert.Never(t, func() bool {
		var gone sc.UsageKind
		return apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: kind}, &gone))
	}, 2*time.Second, 50*time.Millisecond, "a UsageKind in use is not removed")
	k := getKind(t, s, kind)
	assert.False(t, k.DeletionTimestamp.IsZero())
	assert.Equal(t, []string{sc.UsageKindProtection}, k.Finalizers)
	assert.Equal(t, 1, k.Status.Usages)

	// 4, 5, 6. The usage is deleted: its injection goes, then the usage.
	require.NoError(t, s.Kube.Client.Delete(ctx, getUsage(t, s, "deploy-redis-client")))
	s.WaitGone(&sc.ServiceBindingUsage{ObjectMeta: metaName(s.Namespace, "deploy-redis-client")})
	assert.Equal(t, original.Spec, getDeployment(t, s, "web").Spec.Template.Spec, "the snapshot removed the injection")

	// 7, 8. No usage names the kind any more: it goes.
	s.WaitGone(&sc.UsageKind{ObjectMeta: metaName("", kind)})
}

// TestUsageOfAClaimsSecret injects a ServiceClaim's binding Secret, the
// registry's half of the product, the same way.
func TestUsageOfAClaimsSecret(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": "pw"}}`, s.Namespace))
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	kind := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "web-pg", kind, "web", "{kind: ServiceClaim, name: app}", "{envPrefix: {name: PG_}, volume: true}")
	u := waitUsage(t, s, "web-pg", sc.UsagePending, "BindingNotFound")
	assert.Equal(t, "there is no ServiceClaim app", readyMessage(u))

	dbClaim(t, s, "app")
	u = waitUsage(t, s, "web-pg", sc.UsagePending, "BindingNotReady")
	assert.Contains(t, readyMessage(u), "ServiceClaim app holds no service yet")

	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-1")
	u = waitUsage(t, s, "web-pg", sc.UsageReady, "Injected")
	assert.Equal(t, []string{"PG_host", "PG_password", "PG_provider", "PG_type", "SERVICE_BINDING_ROOT"}, u.Status.Env)
	tpl := getDeployment(t, s, "web").Spec.Template
	assert.Contains(t, tpl.Spec.Containers[0].Env, corev1.EnvVar{Name: "PG_password", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "password"}}})
	require.Len(t, tpl.Spec.Volumes, 1)
	assert.Len(t, tpl.Spec.Volumes[0].Projected.Sources, 1, "the claim's Secret has type and provider: no downward files")
	assert.Equal(t, "/bindings/app", tpl.Spec.Containers[0].VolumeMounts[0].MountPath)
	assert.NotContains(t, tpl.Annotations, "binding-type.quartermaster.io/web-pg")
	assert.Equal(t, "true", tpl.Labels[bindingusage.LabelKey("web-pg")])
}

// TestUsageOfAKindWithoutRBAC runs Quartermaster as an identity that may
// read Deployments but not patch them: the UsageKind says which rule is
// missing, and a usage of it fails saying which verb on which resource.
func TestUsageOfAKindWithoutRBAC(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{})
	ctx := context.Background()
	user := "system:serviceaccount:" + s.Namespace + ":qm"
	role := s.Namespace + "-qm"
	s.Create(fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %s}
rules:
- apiGroups: ["", batch, coordination.k8s.io, events.k8s.io, osb.servicefabrik.io, primaza.io, servicecatalog.kyma-project.io, resource.servicefabrik.io, servicebinding.io, apiextensions.k8s.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [apps]
  resources: ["*"]
  verbs: [get, list, watch]`, role))
	s.Create(fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %s}
subjects: [{kind: User, name: %q}]`, role, role, user))
	t.Cleanup(func() {
		_ = s.Kube.Client.Delete(ctx, testenv.Decode(t, fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": %q}}`, role)))
		_ = s.Kube.Client.Delete(ctx, testenv.Decode(t, fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": %q}}`, role)))
	})
	cfg := rest.CopyConfig(s.Kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	sys, err := system.Start(ctx, system.Options{Kube: cfg, Catalog: s.Catalog(), Temporal: testenv.Temporal(t), Worker: true, Watcher: &starter.WatcherOptions{}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sys.Stop()) })

	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": %q}, "stringData": {"user": "u"}}`, s.Namespace))
	s.Create(fmt.Sprintf(`{"apiVersion": "primaza.io/v1alpha1", "kind": "RegisteredService", "metadata": {"name": "db", "namespace": %q},
		"spec": {"serviceClassIdentity": [{"name": "type", "value": "psql"}], "serviceEndpointDefinition": [{"name": "user", "valueFromSecret": {"name": "creds", "key": "user"}}]}}`, s.Namespace))
	s.Create(fmt.Sprintf(`{"apiVersion": "primaza.io/v1alpha1", "kind": "ServiceClaim", "metadata": {"name": "app", "namespace": %q},
		"spec": {"serviceClassIdentity": [{"name": "type", "value": "psql"}], "serviceEndpointDefinitionKeys": ["user"], "environmentTag": "dev"}}`, s.Namespace))
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	kind := usageKind(t, s, "deployment", deploymentKind)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ready := meta.FindStatusCondition(getKind(c, s, kind).Status.Conditions, "Ready")
		require.NotNil(c, ready)
		assert.Equal(c, "Forbidden", ready.Reason)
		assert.Equal(c, `Quartermaster lacks the RBAC rules {apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]} in every namespace`, ready.Message)
	}, 20*time.Second, 50*time.Millisecond, "the UsageKind names the missing rule")

	createUsage(t, s, "web-db", kind, "web", "{kind: ServiceClaim, name: app}", "")
	u := waitUsage(t, s, "web-db", sc.UsageFailed, "Forbidden")
	assert.Contains(t, readyMessage(u), "Quartermaster may not patch Deployment web (grant it patch on this kind)")
	assert.Contains(t, readyMessage(u), `cannot patch resource "deployments" in API group "apps"`)
	assert.Equal(t, []corev1.EnvVar{{Name: "MODE", Value: "prod"}}, getDeployment(t, s, "web").Spec.Template.Spec.Containers[0].Env, "nothing was injected")
}

// TestUsageMovedToAnotherWorkload: a usage that names another workload
// leaves the first as its user wrote it.
func TestUsageMovedToAnotherWorkload(t *testing.T) {
	s, secret := usageSystem(t, true)
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	s.Kube.Kubectl(t, strings.ReplaceAll(testenv.WebManifest(s.Namespace), "web", "api"), "apply", "-f", "-")
	original := getDeployment(t, s, "web").Spec.Template
	kind := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "db", kind, "web", "{name: db}", "{envPrefix: {name: DB_}}")
	waitUsage(t, s, "db", sc.UsageReady, "Injected")
	injected(t, getDeployment(t, s, "web").Spec.Template, "db", secret)

	u := getUsage(t, s, "db")
	u.Spec.UsedBy.Name = "api"
	require.NoError(t, s.Kube.Client.Update(context.Background(), u))
	u = waitUsage(t, s, "db", sc.UsageReady, "Injected")
	assert.Equal(t, "api", u.Status.Workload)
	injected(t, getDeployment(t, s, "api").Spec.Template, "db", secret)
	assert.Equal(t, original, getDeployment(t, s, "web").Spec.Template, "the first workload is as its user wrote it")
}

// TestUsageKindChecksTheWorkersAccount: with the workers under a service
// account of their own (the chart's shape), a UsageKind is Permitted only
// if that account may get and patch its workloads, and says which rule the
// account lacks.
func TestUsageKindChecksTheWorkersAccount(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{})
	role := s.Namespace + "-workers"
	s.Create(fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %s}
rules: [{apiGroups: [apps], resources: [deployments], verbs: [get]}]`, role))
	s.Create(fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects: [{kind: ServiceAccount, name: workers, namespace: %[2]s}]`, role, s.Namespace))
	t.Cleanup(func() {
		for _, kind := range []string{"ClusterRoleBinding", "ClusterRole"} {
			_ = s.Kube.Client.Delete(context.Background(), testenv.Decode(t, fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": %q, "metadata": {"name": %q}}`, kind, role)))
		}
	})
	sys, err := system.Start(context.Background(), system.Options{Kube: s.Kube.Config, Catalog: s.Catalog(), Temporal: testenv.Temporal(t),
		Watcher: &starter.WatcherOptions{WorkerServiceAccount: s.Namespace + ":workers"}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sys.Stop()) })

	kind := usageKind(t, s, "deployment", deploymentKind)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ready := meta.FindStatusCondition(getKind(c, s, kind).Status.Conditions, "Ready")
		require.NotNil(c, ready)
		assert.Equal(c, "Forbidden", ready.Reason)
		assert.Equal(c, `Quartermaster lacks the RBAC rules {apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]} in every namespace`+
			" for the workers' service account "+s.Namespace+":workers", ready.Message)
	}, 20*time.Second, 50*time.Millisecond, "the UsageKind names the rule the workers lack")
}
