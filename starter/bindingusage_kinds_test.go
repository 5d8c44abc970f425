package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestUsageInjectsIntoOtherKinds injects into a StatefulSet (its pod gets
// the variable), a CronJob (through its jobTemplate) and a kubeless
// Function whose pod template lies deeper, mounted as a servicebinding.io
// volume; removing each usage restores the user's object.
func TestUsageInjectsIntoOtherKinds(t *testing.T) {
	s, secret := usageSystem(t, true)
	ctx := context.Background()
	s.InstallCRD("function")

	s.Create(fmt.Sprintf(`
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: cache, namespace: %s}
spec:
  serviceName: cache
  replicas: 1
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: cache, image: example.com/cache}]}`, s.Namespace))
	s.Create(fmt.Sprintf(`
apiVersion: batch/v1
kind: CronJob
metadata: {name: report, namespace: %s}
spec:
  schedule: "0 0 1 1 *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: report, image: example.com/report}]`, s.Namespace))
	s.Create(fmt.Sprintf(`
apiVersion: kubeless.io/v1beta1
kind: Function
metadata: {name: redis-client, namespace: %s}
spec:
  handler: handler.main
  runtime: python3.11
  deployment:
    spec:
      template:
        spec:
          containers: [{name: function, image: example.com/fn}]`, s.Namespace))
	functionBefore := getObject(t, s, "kubeless.io/v1beta1", "Function", "redis-client")

	sts := usageKind(t, s, "statefulset", "  resource: {group: apps, kind: StatefulSet, version: v1}\n  labelsPath: spec.template.metadata.labels")
	cron := usageKind(t, s, "cronjob", "  resource: {group: batch, kind: cronjob, version: v1}\n  labelsPath: spec.jobTemplate.spec.template.metadata.labels")
	fn := usageKind(t, s, "function", `  displayName: Function
  resource: {group: kubeless.io, kind: function, version: v1beta1}
  labelsPath: spec.deployment.spec.template.metadata.labels
  containersPath: spec.deployment.spec.template.spec.containers`)
	createUsage(t, s, "cache-db", sts, "cache", "{name: db}", "{envPrefix: {name: DB_}}")
	createUsage(t, s, "report-db", cron, "report", "{name: db, kind: SFServiceBinding}", "{envPrefix: {name: DB_}}")
	createUsage(t, s, "fn-redis-client", fn, "redis-client", "{name: db}", "{volume: true}")
	for _, name := range []string{"cache-db", "report-db", "fn-redis-client"} {
		waitUsage(t, s, name, sc.UsageReady, "Injected")
	}

	// The StatefulSet's pod is replaced by one with the variable.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var pod corev1.Pod
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "cache-0"}, &pod))
		assert.Equal(c, "true", pod.Labels[bindingusage.LabelKey("cache-db")])
		assert.Contains(c, envNames(pod), "DB_user")
		assert.Equal(c, corev1.PodRunning, pod.Status.Phase)
	}, 60*time.Second, 100*time.Millisecond, "the StatefulSet's pod has the binding")

	var cj batchv1.CronJob
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "report"}, &cj))
	injected(t, cj.Spec.JobTemplate.Spec.Template, "report-db", secret)

	// The Function: the labels path is created, the volume mounted at
	// $SERVICE_BINDING_ROOT/db with type and provider beside the keys.
	f := getObject(t, s, "kubeless.io/v1beta1", "Function", "redis-client")
	template, _, _ := unstructured.NestedMap(f.Object, "spec", "deployment", "spec", "template")
	var pod corev1.PodTemplateSpec
	require.NoError(t, runtimeFromUnstructured(template, &pod))
	assert.Equal(t, map[string]string{bindingusage.LabelKey("fn-redis-client"): "true"}, pod.Labels)
	assert.Equal(t, "quartermaster", pod.Annotations["binding-provider.quartermaster.io/fn-redis-client"])
	assert.Equal(t, s.Namespace, pod.Annotations["binding-type.quartermaster.io/fn-redis-client"], "type is the service's name")
	c := pod.Spec.Containers[0]
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "SERVICE_BINDING_ROOT", Value: "/bindings"})
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "user", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "user"}}})
	assert.Equal(t, []corev1.VolumeMount{{Name: "qm-fn-redis-client", MountPath: "/bindings/db", ReadOnly: true}}, c.VolumeMounts)
	require.Len(t, pod.Spec.Volumes, 1)
	sources := pod.Spec.Volumes[0].Projected.Sources
	require.Len(t, sources, 2)
	assert.Equal(t, secret, sources[0].Secret.Name)
	require.Len(t, sources[1].DownwardAPI.Items, 2)
	assert.Equal(t, "type", sources[1].DownwardAPI.Items[0].Path)
	assert.Equal(t, "provider", sources[1].DownwardAPI.Items[1].Path)

	// Removal restores each object as its user wrote it.
	var stsBefore appsv1.StatefulSet
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "cache"}, &stsBefore))
	for _, name := range []string{"cache-db", "report-db", "fn-redis-client"} {
		require.NoError(t, s.Kube.Client.Delete(ctx, getUsage(t, s, name)))
		s.WaitGone(&sc.ServiceBindingUsage{ObjectMeta: metaName(s.Namespace, name)})
	}
	f = getObject(t, s, "kubeless.io/v1beta1", "Function", "redis-client")
	assert.Equal(t, functionBefore.Object["spec"], f.Object["spec"], "the Function is as its user wrote it")
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "report"}, &cj))
	assert.Equal(t, []corev1.EnvVar(nil), cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env)
	assert.Empty(t, cj.Spec.JobTemplate.Spec.Template.Labels)
	assert.Empty(t, cj.Spec.JobTemplate.Spec.Template.Annotations)
	var after appsv1.StatefulSet
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "cache"}, &after))
	assert.Equal(t, map[string]string{"app": "cache"}, after.Spec.Template.Labels)
	assert.Empty(t, after.Spec.Template.Spec.Containers[0].Env)
}

func getObject(t *testing.T, s *testenv.System, apiVersion, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, u))
	return u
}

func runtimeFromUnstructured(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
