package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// waitServiceBinding waits until the ServiceBinding's Ready condition has
// status and reason at its current generation, and returns it.
func waitServiceBinding(t *testing.T, s *testenv.System, name, status, reason string) *sbv1.ServiceBinding {
	t.Helper()
	var sb sbv1.ServiceBinding
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &sb))
		ready := meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady)
		require.NotNil(c, ready, "no Ready condition yet")
		assert.Equal(c, sb.Generation, ready.ObservedGeneration)
		assert.Equal(c, status+" "+reason, string(ready.Status)+" "+ready.Reason, ready.Message)
	}, 30*time.Second, 50*time.Millisecond, "ServiceBinding %s is Ready=%s (%s)", name, status, reason)
	return &sb
}

// projectedVolume is what a ServiceBinding named binding adds to a pod's
// volumes for Secret secret, with the type and provider files.
func projectedVolume(binding, secret string) corev1.Volume {
	usage := servicebinding.UsageName(binding)
	file := func(name, key string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: name, FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", key)}}
	}
	mode := int32(420)
	return corev1.Volume{Name: bindingusage.VolumeName(usage), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				file("type", "binding-type.quartermaster.io/"+usage), file("provider", "binding-provider.quartermaster.io/"+usage)}}},
		},
	}}}
}

// TestServiceBindingToASecret applies the specification's examples
// unchanged: a ServiceBinding to a Secret, by workload name, with
// spec.env. The pod template gets the volume at
// $SERVICE_BINDING_ROOT/<name>, the root and the variable, and nothing
// else; a new Secret content rolls it, a spec change that projects the
// same does not; the Secret deleted turns it Ready=False and back; its
// deletion takes back exactly what it projected.
func TestServiceBindingToASecret(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	s.Kube.Kubectl(t, "", "label", "deployment", "web", "tier=front", "-n", s.Namespace)
	before := getDeployment(t, s, "web").Spec.Template
	s.Create(fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: account-db, namespace: %s}
stringData: {type: postgresql, provider: bitnami, host: db.example, password: s3cr3t}`, s.Namespace))
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: account-service, namespace: %s}
spec:
  service: {apiVersion: v1, kind: Secret, name: account-db}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}
  env:
  - {name: ACCOUNT_SERVICE_HOST, key: host}
  - {name: ACCOUNT_SERVICE_PASSWORD, key: password}`, s.Namespace))
	sb := waitServiceBinding(t, s, "account-service", "True", "Projected")
	assert.Equal(t, &sbv1.ServiceBindingSecretReference{Name: "account-db"}, sb.Status.Binding)
	for _, c := range []string{sbv1.ConditionServiceAvailable, sbv1.ConditionWorkloadProjected} {
		assert.True(t, meta.IsStatusConditionTrue(sb.Status.Conditions, c), c)
	}

	// The pod template: the user's, plus the projection and nothing else.
	tpl := getDeployment(t, s, "web").Spec.Template
	usage := servicebinding.UsageName("account-service")
	secretVar := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "account-db"}, Key: key}}}
	}
	want := before.DeepCopy()
	want.Labels[bindingusage.LabelKey(usage)] = "true"
	want.Annotations = map[string]string{bindingusage.HashKey(usage): tpl.Annotations[bindingusage.HashKey(usage)]}
	want.Spec.Containers[0].Env = append(want.Spec.Containers[0].Env,
		secretVar("ACCOUNT_SERVICE_HOST", "host"), secretVar("ACCOUNT_SERVICE_PASSWORD", "password"),
		corev1.EnvVar{Name: "SERVICE_BINDING_ROOT", Value: "/bindings"})
	want.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: bindingusage.VolumeName(usage), MountPath: "/bindings/account-service", ReadOnly: true}}
	want.Spec.Volumes = []corev1.Volume{{Name: bindingusage.VolumeName(usage), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(420)),
		Sources:     []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "account-db"}}}},
	}}}}
	assert.Equal(t, *want, tpl, "the Secret has type and provider: no files are added for them")
	hash := tpl.Annotations[bindingusage.HashKey(usage)]
	require.NotEmpty(t, hash)

	// A spec change that projects the same (the workload by a selector
	// that matches it) does not roll the workload.
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(sb), sb))
	sb.Spec.Workload.Name = ""
	sb.Spec.Workload.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}
	require.NoError(t, s.Kube.Client.Update(ctx, sb))
	waitServiceBinding(t, s, "account-service", "True", "Projected")
	assert.Equal(t, tpl, getDeployment(t, s, "web").Spec.Template, "nothing in the pod template changed")

	// New content in the Secret: a new digest, so the workload rolls.
	var secret corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "account-db"}, &secret))
	secret.Data["password"] = []byte("n3w")
	require.NoError(t, s.Kube.Client.Update(ctx, &secret))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getDeployment(c, s, "web").Spec.Template.Annotations[bindingusage.HashKey(usage)]
		assert.NotEqual(c, hash, now)
	}, 30*time.Second, 50*time.Millisecond, "the pod template gets the new digest")

	// The Secret deleted: Ready=False with the reason; back: Ready=True.
	require.NoError(t, s.Kube.Client.Delete(ctx, &secret))
	sb = waitServiceBinding(t, s, "account-service", "False", "ServiceNotFound")
	assert.Equal(t, "Secret account-db does not exist in namespace "+s.Namespace, meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)
	assert.False(t, meta.IsStatusConditionTrue(sb.Status.Conditions, sbv1.ConditionServiceAvailable))
	s.Create(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: account-db, namespace: %s}\nstringData: {type: postgresql, host: db.example, password: again}", s.Namespace))
	waitServiceBinding(t, s, "account-service", "True", "Projected")

	// Deleted: exactly the user's template again.
	require.NoError(t, s.Kube.Client.Delete(ctx, sb))
	s.WaitGone(sb)
	after := getDeployment(t, s, "web").Spec.Template
	assert.Equal(t, before.Labels, after.Labels)
	assert.Empty(t, after.Annotations)
	assert.Equal(t, before.Spec.Containers, after.Spec.Containers)
	assert.Empty(t, after.Spec.Volumes)

	// Its run ended with it; its history holds names, never values.
	id := runs.ServiceBindingID(s.Namespace, "account-service")
	h := s.History(id, s.ClosedRun(id, runs.ServiceBindingType))
	assert.Contains(t, testenv.HistoryText(h), "account-db")
	assert.NotContains(t, testenv.HistoryText(h), "s3cr3t", "credentials never enter the history")
	recorded(t, h, "service-binding")
}

// TestServiceBindingToProvisionedServices: an SFServiceBinding serves as
// the service (its status.binding.name names its credentials), into every
// Deployment a selector matches, with type and provider as files; a user's
// own SERVICE_BINDING_ROOT is where the binding goes, and a user's volume
// of the projection's name is never overwritten.
func TestServiceBindingToProvisionedServices(t *testing.T) {
	s, credentials := usageSystem(t, true)
	var osbBinding osbv1alpha1.SFServiceBinding
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db"}, &osbBinding))
	assert.Equal(t, &osbv1alpha1.SecretReference{Name: credentials}, osbBinding.Status.Binding, "an SFServiceBinding is a Provisioned Service")
	for _, name := range []string{"web", "api"} {
		root := ""
		if name == "api" {
			root = "\n        env: [{name: SERVICE_BINDING_ROOT, value: /etc/bindings}]"
		}
		s.Kube.Kubectl(t, fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s, labels: {tier: front}}
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers:
      - name: app
        image: example.com/%s%s`, name, s.Namespace, name, name, name, root), "apply", "-f", "-")
	}
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: db, namespace: %s}
spec:
  name: orders-db
  service: {apiVersion: osb.servicefabrik.io/v1alpha1, kind: SFServiceBinding, name: db}
  workload:
    apiVersion: apps/v1
    kind: Deployment
    selector: {matchLabels: {tier: front}}`, s.Namespace))
	sb := waitServiceBinding(t, s, "db", "True", "Projected")
	assert.Equal(t, credentials, sb.Status.Binding.Name, "the SFServiceBinding's status.binding.name")
	assert.Equal(t, []string{"api", "web"}, sb.Status.Projected.Workloads)

	usage := servicebinding.UsageName("db")
	for name, root := range map[string]string{"web": "/bindings", "api": "/etc/bindings"} {
		tpl := getDeployment(t, s, name).Spec.Template
		assert.Equal(t, []corev1.VolumeMount{{Name: bindingusage.VolumeName(usage), MountPath: root + "/orders-db", ReadOnly: true}}, tpl.Spec.Containers[0].VolumeMounts, name)
		assert.Equal(t, []corev1.Volume{projectedVolume("db", credentials)}, tpl.Spec.Volumes, name)
		assert.Equal(t, s.Namespace, tpl.Annotations["binding-type.quartermaster.io/"+usage], "the type file is the plan's service (the test's is named after its namespace)")
		assert.Equal(t, "quartermaster", tpl.Annotations["binding-provider.quartermaster.io/"+usage])
		assert.Equal(t, []corev1.EnvVar{{Name: "SERVICE_BINDING_ROOT", Value: root}}, tpl.Spec.Containers[0].Env, "%s: the user's root is kept", name)
	}

	// The credentials Secret deleted: Ready=False with the reason; back
	// (the next bind's pass rewrites it): Ready=True.
	var creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: credentials}, &creds))
	require.NoError(t, s.Kube.Client.Delete(context.Background(), &creds))
	sb = waitServiceBinding(t, s, "db", "False", "SecretNotFound")
	assert.Equal(t, "the service's Secret "+credentials+" does not exist", meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)
	creds.ResourceVersion, creds.UID, creds.OwnerReferences = "", "", nil
	require.NoError(t, s.Kube.Client.Create(context.Background(), &creds))
	waitServiceBinding(t, s, "db", "True", "Projected")

	// A user's volume of the projection's name: refused, with the reason.
	s.Kube.Kubectl(t, fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: cache, namespace: %s}
spec:
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      containers: [{name: app, image: example.com/cache}]
      volumes: [{name: %s, emptyDir: {}}]`, s.Namespace, bindingusage.VolumeName(servicebinding.UsageName("cache-db"))), "apply", "-f", "-")
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: cache-db, namespace: %s}
spec:
  service: {apiVersion: osb.servicefabrik.io/v1alpha1, kind: SFServiceBinding, name: db}
  workload: {apiVersion: apps/v1, kind: Deployment, name: cache}`, s.Namespace))
	sb = waitServiceBinding(t, s, "cache-db", "False", "Conflict")
	assert.Contains(t, meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message, "already has a volume named qm-sb-cache-db, set by someone else")
	var cache appsv1.Deployment
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "cache"}, &cache))
	assert.NotNil(t, cache.Spec.Template.Spec.Volumes[0].EmptyDir, "the user's volume is untouched")
}

// TestServiceBindingToAnotherProvisionedService: any resource whose
// status.binding.name names a Secret is a service, not only
// Quartermaster's own (a third party's Database here). While it names none
// the ServiceBinding says so; once it names one, or another, the
// projection follows within seconds (the watcher watches the kind as soon
// as a ServiceBinding names it); once it is gone, Ready=False.
func TestServiceBindingToAnotherProvisionedService(t *testing.T) {
	ctx := context.Background()
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	s.InstallCRD("database")
	for _, name := range []string{"orders-v1", "orders-v2"} {
		s.Create(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\nstringData: {username: %s}", name, s.Namespace, name))
	}
	db := s.Create(fmt.Sprintf("apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: %s}\nspec: {engine: postgres}", s.Namespace))
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: orders, namespace: %s}
spec:
  service: {apiVersion: example.com/v1, kind: Database, name: orders}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}`, s.Namespace))
	sb := waitServiceBinding(t, s, "orders", "False", "ServiceNotReady")
	assert.Equal(t, "Database orders has no status.binding.name yet: it is not a Provisioned Service, or it is not ready",
		meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)

	for _, secret := range []string{"orders-v1", "orders-v2"} {
		patch := fmt.Sprintf(`{"status": {"binding": {"name": %q}}}`, secret)
		require.NoError(t, s.Kube.Client.Status().Patch(ctx, db, ctrlclient.RawPatch(types.MergePatchType, []byte(patch))))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var got sbv1.ServiceBinding
			require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "orders"}, &got))
			require.NotNil(c, got.Status.Binding)
			assert.Equal(c, secret, got.Status.Binding.Name)
			assert.Equal(c, []string{secret}, projectedSecrets(getDeployment(c, s, "web").Spec.Template, "orders"))
		}, 20*time.Second, 50*time.Millisecond, "the Database names %s: the ServiceBinding projects it into web", secret)
	}
	waitServiceBinding(t, s, "orders", "True", "Projected")

	require.NoError(t, s.Kube.Client.Delete(ctx, db))
	sb = waitServiceBinding(t, s, "orders", "False", "ServiceNotFound")
	assert.Equal(t, "Database orders does not exist in namespace "+s.Namespace, meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)
}

// projectedSecrets are the Secrets a ServiceBinding's volume projects in a
// pod template.
func projectedSecrets(tpl corev1.PodTemplateSpec, binding string) []string {
	var names []string
	for _, v := range tpl.Spec.Volumes {
		if v.Name != bindingusage.VolumeName(servicebinding.UsageName(binding)) || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				names = append(names, src.Secret.Name)
			}
		}
	}
	return names
}

// TestServiceBindingWithAMapping: a ClusterWorkloadResourceMapping says
// where a CRD workload (a kubeless Function) keeps its containers; the
// projection goes there, and only there, and comes back out on deletion.
func TestServiceBindingWithAMapping(t *testing.T) {
	s, credentials := usageSystem(t, true)
	ctx := context.Background()
	s.InstallCRD("function")
	s.Create(fmt.Sprintf(`
apiVersion: kubeless.io/v1beta1
kind: Function
metadata: {name: orders, namespace: %s}
spec:
  handler: handler.main
  runtime: python3.11
  deployment:
    spec:
      template:
        spec:
          containers: [{name: function, image: example.com/fn}]`, s.Namespace))
	before := getObject(t, s, "kubeless.io/v1beta1", "Function", "orders")
	if err := s.Kube.Client.Create(ctx, testenv.Decode(t, `
apiVersion: servicebinding.io/v1
kind: ClusterWorkloadResourceMapping
metadata: {name: functions.kubeless.io}
spec:
  versions:
  - version: "*"
    annotations: .spec.deployment.spec.template.metadata.annotations
    containers:
    - path: .spec.deployment.spec.template.spec.containers[*]
      name: .name
    volumes: .spec.deployment.spec.template.spec.volumes`)); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: orders-db, namespace: %s}
spec:
  service: {apiVersion: osb.servicefabrik.io/v1alpha1, kind: SFServiceBinding, name: db}
  workload: {apiVersion: kubeless.io/v1beta1, kind: Function, name: orders}
  env: [{name: DB_USER, key: user}]`, s.Namespace))
	waitServiceBinding(t, s, "orders-db", "True", "Projected")

	fn := getObject(t, s, "kubeless.io/v1beta1", "Function", "orders")
	template, _, err := unstructured.NestedMap(fn.Object, "spec", "deployment", "spec", "template")
	require.NoError(t, err)
	var tpl corev1.PodTemplateSpec
	require.NoError(t, runtimeFromUnstructured(template, &tpl))
	usage := servicebinding.UsageName("orders-db")
	assert.Equal(t, []corev1.VolumeMount{{Name: bindingusage.VolumeName(usage), MountPath: "/bindings/orders-db", ReadOnly: true}}, tpl.Spec.Containers[0].VolumeMounts)
	assert.Contains(t, tpl.Spec.Containers[0].Env, corev1.EnvVar{Name: "DB_USER", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: credentials}, Key: "user"}}})
	require.Len(t, tpl.Spec.Volumes, 1)
	assert.Equal(t, bindingusage.VolumeName(usage), tpl.Spec.Volumes[0].Name)
	assert.Equal(t, before.Object["spec"].(map[string]any)["handler"], fn.Object["spec"].(map[string]any)["handler"])
	_, found, _ := unstructured.NestedFieldNoCopy(fn.Object, "spec", "template")
	assert.False(t, found, "nothing is written at the PodSpec default")

	var sb sbv1.ServiceBinding
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "orders-db"}, &sb))
	require.NoError(t, s.Kube.Client.Delete(ctx, &sb))
	s.WaitGone(&sb)
	after := getObject(t, s, "kubeless.io/v1beta1", "Function", "orders")
	assert.Equal(t, before.Object["spec"], after.Object["spec"], "the Function's spec is the user's again")
}

// claimIntoWeb creates the ServiceBinding web-pg, which projects the
// claim app's password into the Deployment web as PG_PASSWORD.
func claimIntoWeb(s *testenv.System) {
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: web-pg, namespace: %s}
spec:
  service: {apiVersion: primaza.io/v1alpha1, kind: ServiceClaim, name: app}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}
  env: [{name: PG_PASSWORD, key: password}]`, s.Namespace))
}

// TestServiceBindingToAClaim: a ServiceClaim serves as the service, once
// it holds a service (its status.binding.name names the claim's Secret,
// which carries type and provider itself).
func TestServiceBindingToAClaim(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": "pw"}}`, s.Namespace))
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	claimIntoWeb(s)
	sb := waitServiceBinding(t, s, "web-pg", "False", "ServiceNotFound")
	assert.Equal(t, "ServiceClaim app does not exist in namespace "+s.Namespace, meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)

	dbClaim(t, s, "app")
	sb = waitServiceBinding(t, s, "web-pg", "False", "ServiceNotReady")
	assert.Equal(t, "ServiceClaim app has no status.binding.name yet: it is not a Provisioned Service, or it is not ready", meta.FindStatusCondition(sb.Status.Conditions, sbv1.ConditionReady).Message)

	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-1")
	sb = waitServiceBinding(t, s, "web-pg", "True", "Projected")
	assert.Equal(t, "app", sb.Status.Binding.Name)
	tpl := getDeployment(t, s, "web").Spec.Template
	assert.Contains(t, tpl.Spec.Containers[0].Env, corev1.EnvVar{Name: "PG_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "password"}}})
	require.Len(t, tpl.Spec.Volumes, 1)
	assert.Len(t, tpl.Spec.Volumes[0].Projected.Sources, 1, "the claim's Secret has type and provider: no downward files")
	assert.Equal(t, "/bindings/web-pg", tpl.Spec.Containers[0].VolumeMounts[0].MountPath)
}
