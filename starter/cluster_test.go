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
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// These tests need what the embedded cluster has beyond an API server: the
// garbage collector, the namespace and workload controllers, the scheduler
// and kwok's simulated nodes.

// TestKeyValueStoreFollowsItsDeployment runs the key-value-store sample
// through provision, bind, scale-up and deprovision, each done only when
// the Deployment says so.
func TestKeyValueStoreFollowsItsDeployment(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()

	s.Instance("cache", testenv.KeyValuePlan, "")
	inst := s.WaitInstance("cache", "provisioned", testenv.Succeeded(1))
	name := fmt.Sprint(s.RegistryValue("qm-instance-cache", "name"))
	dep := &appsv1.Deployment{}
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, dep))
	assert.EqualValues(t, 1, dep.Status.AvailableReplicas, "succeeded only with the replica available")
	assert.Equal(t, "1 of 1 replicas available", inst.Status.Description)
	assert.Len(t, runningPods(t, s, name), 1)
	for _, obj := range []ctrlclient.Object{&corev1.Service{}, &corev1.Secret{}, &policyv1.PodDisruptionBudget{}} {
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, obj), "%T", obj)
	}

	// Bind returns host, port and password from the sources.
	b := s.Bind("cache-app", "cache", testenv.KeyValuePlan)
	var creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: b.Status.Response.SecretRef}, &creds))
	var password corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &password))
	host := name + "." + s.Namespace + ".svc"
	pw := string(password.Data["password"])
	assert.Equal(t, map[string][]byte{
		"host":     []byte(host),
		"port":     []byte("6379"),
		"password": []byte(pw),
		"uri":      []byte("redis://:" + pw + "@" + host + ":6379"),
	}, creds.Data)
	require.Len(t, b.Status.Response.Endpoints, 1)
	assert.Equal(t, host, b.Status.Response.Endpoints[0].Host)

	// Scaling by an update waits for the new replica count.
	base := inst.DeepCopy()
	inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"replicas": 3}`)}
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	inst = s.WaitInstance("cache", "scaled to 3", testenv.Succeeded(2))
	assert.Equal(t, "3 of 3 replicas available", inst.Status.Description)
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(dep), dep))
	assert.EqualValues(t, 3, dep.Status.AvailableReplicas)
	assert.Len(t, runningPods(t, s, name), 3)

	// Deprovision (the binding first, as the annotation asks) is done only
	// when the pods are gone.
	base = inst.DeepCopy()
	metav1.SetMetaDataAnnotation(&inst.ObjectMeta, osbv1alpha1.DeprovisionInUseAnnotation, "true")
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	assert.Empty(t, pods(t, s, name), "no pod outlives the instance")
	for _, obj := range []ctrlclient.Object{&appsv1.Deployment{}, &corev1.Service{}, &corev1.Secret{}, &policyv1.PodDisruptionBudget{}} {
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, obj)
		assert.True(t, apierrors.IsNotFound(err), "%T %s is deleted: %v", obj, name, err)
	}
}

// TestStoreThatCannotBeScheduledFails asks for more CPU than any simulated
// node has: the instance fails at the plan's maximum_polling_duration, and
// says why in the Deployment's own words.
func TestStoreThatCannotBeScheduledFails(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	planID := s.Plan("huge", `  maximum_polling_duration: 8
  context: {replicas: 1, cpu: "200", memory: 1Gi, image: "valkey/valkey:8.1"}
`, testenv.SampleTemplates(t, "key-value-store"))
	s.Instance("huge", planID, "")
	inst := s.WaitInstance("huge", "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	assert.Contains(t, inst.Status.Description, "provision did not finish within the plan's maximum_polling_duration of 8s")
	assert.Contains(t, inst.Status.Description, "0 of 1 replicas available; Available=False: Deployment does not have minimum availability.")
}

// TestGarbageCollectorRemovesWhatTheRegistryOwned deletes registry Secrets
// directly, as an operator might, and leaves the rest to the garbage
// collector: an instance's own objects go with its registry, and a
// singleton that two instances share goes with the last of them (the Couchbase broker's registries).
func TestGarbageCollectorRemovesWhatTheRegistryOwned(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	planID := s.Plan("owned", "", `  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-settings}
      ---
      apiVersion: v1
      kind: Secret
      metadata: {name: {{ .instance.metadata.name }}-password}
      stringData: {password: {{ generatePassword "password" 16 }}}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: shared-by-all
        annotations: {quartermaster.io/singleton: "true"}`)
	s.Instance("first", planID, "")
	s.Instance("second", planID, "")
	s.WaitInstance("first", "provisioned", testenv.Succeeded(1))
	s.WaitInstance("second", "provisioned", testenv.Succeeded(1))
	shared := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "shared-by-all"}}
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(shared), shared))
	require.Len(t, shared.OwnerReferences, 2, "both registries own the singleton")

	gone := func(obj ctrlclient.Object) bool {
		return apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj))
	}
	deleteRegistry := func(instance string) {
		reg := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "qm-instance-" + instance}}
		require.NoError(t, s.Kube.Client.Delete(ctx, reg))
		for _, obj := range []ctrlclient.Object{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: instance + "-settings"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: instance + "-password"}},
		} {
			require.Eventually(t, func() bool { return gone(obj) }, time.Minute, 50*time.Millisecond,
				"the garbage collector deletes %s's %s", instance, obj.GetName())
		}
	}

	deleteRegistry("first")
	// The collector drops the first owner's reference from the singleton
	// on its own time, after the objects the first owned alone.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var now corev1.ConfigMap
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(shared), &now), "the singleton survives its first owner")
		var owners []string
		for _, o := range now.OwnerReferences {
			owners = append(owners, o.Name)
		}
		assert.Equal(c, []string{"qm-instance-second"}, owners)
	}, time.Minute, 50*time.Millisecond, "the singleton is owned by the second registry alone")

	deleteRegistry("second")
	require.Eventually(t, func() bool { return gone(shared) }, time.Minute, 50*time.Millisecond, "the singleton goes with its last owner")
}

// pods lists the pods of the key-value store name.
func pods(t *testing.T, s *testenv.System, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	require.NoError(t, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace),
		ctrlclient.MatchingLabels{"app.kubernetes.io/instance": name}))
	return list.Items
}

// runningPods lists its pods that run on a simulated node.
func runningPods(t *testing.T, s *testenv.System, name string) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	for _, p := range pods(t, s, name) {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			running = append(running, p)
		}
	}
	return running
}

// TestBindingCreatedWithItsInstance: a binding applied together with its
// instance (one kubectl apply) waits for the provision, then binds; it
// does not keep reading the instance as it was when the bind began.
func TestBindingCreatedWithItsInstance(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	s.Instance("cache", testenv.KeyValuePlan, "")
	b := s.Bind("cache-app", "cache", testenv.KeyValuePlan)
	assert.NotEmpty(t, b.Status.Response.SecretRef)
}
