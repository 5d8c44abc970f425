package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// register makes an SFCluster named name whose Secret holds kubeconfig.
func register(t testing.TB, s *testenv.System, name string, kubeconfig []byte, limit *int32) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.Kube.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name + "-kubeconfig"},
		Data:       map[string][]byte{"kubeconfig": kubeconfig}}))
	require.NoError(t, s.Kube.Client.Create(ctx, &resourcev1alpha1.SFCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec:       resourcev1alpha1.SFClusterSpec{SecretRef: name + "-kubeconfig", SchedulingLimitPercentage: limit}}))
}

// waitCluster waits until the SFCluster named name satisfies cond.
func waitCluster(t testing.TB, s *testenv.System, name, what string, cond func(*resourcev1alpha1.SFCluster) bool) *resourcev1alpha1.SFCluster {
	t.Helper()
	var sfc resourcev1alpha1.SFCluster
	require.Eventually(t, func() bool {
		return s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &sfc) == nil && cond(&sfc)
	}, 30*time.Second, 50*time.Millisecond, "%s: %s (status %+v)", name, what, &sfc.Status)
	return &sfc
}

func readyCondition(sfc *resourcev1alpha1.SFCluster) *metav1.Condition {
	return meta.FindStatusCondition(sfc.Status.Conditions, "Ready")
}

// addNode registers a node with allocatable cpu and memory in a sister.
func addNode(t *testing.T, c *testenv.Cluster, name, cpu, memory string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	require.NoError(t, c.Client.Create(ctx, node))
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Capacity = node.Status.Allocatable
	require.NoError(t, c.Client.Status().Update(ctx, node))
}

// TestClusterRegistry: the watcher keeps each SFCluster's status from a
// probe of its cluster (Ready and its reason, version, capacity, the pods'
// requests, the instances scheduled there), shows it in kubectl, and holds
// an SFCluster with instances on it until they are gone.
func TestClusterRegistry(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Watcher: true, ClusterProbePeriod: 300 * time.Millisecond})
	ctx := context.Background()
	eu1 := testenv.StartSister(t, 0)
	addNode(t, eu1.Cluster, "n-1", "4", "8Gi")
	addNode(t, eu1.Cluster, "n-2", "2", "4Gi")
	require.NoError(t, eu1.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}))
	require.NoError(t, eu1.Client.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "app", Image: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
	}))
	register(t, s, "eu-1", eu1.Kubeconfig, ptr.To[int32](80))

	sfc := waitCluster(t, s, "eu-1", "probed and ready", func(c *resourcev1alpha1.SFCluster) bool {
		r := readyCondition(c)
		return r != nil && r.Status == metav1.ConditionTrue
	})
	assert.Equal(t, resourcev1alpha1.ClusterReady, sfc.Status.State)
	assert.Regexp(t, `^v1\.\d+\.\d+`, sfc.Status.KubernetesVersion)
	assert.Equal(t, "Kubernetes "+sfc.Status.KubernetesVersion+", 2 schedulable nodes", readyCondition(sfc).Message)
	assert.Equal(t, "6", ptr.To(sfc.Status.TotalCapacity[corev1.ResourceCPU]).String())
	assert.Equal(t, "12Gi", ptr.To(sfc.Status.TotalCapacity[corev1.ResourceMemory]).String())
	assert.Equal(t, sfc.Status.Allocatable, sfc.Status.CurrentCapacity, "the nodes' capacity now, as Service Fabrik names it")
	assert.Equal(t, "1500m", ptr.To(sfc.Status.Requests[corev1.ResourceCPU]).String())
	assert.Equal(t, "1", ptr.To(sfc.Status.Requests[corev1.ResourcePods]).String())
	assert.Zero(t, sfc.Status.ServiceInstanceCount)

	// An autoscaler's maximum, as spec.totalCapacity, is the capacity.
	base := sfc.DeepCopy()
	sfc.Spec.TotalCapacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	require.NoError(t, s.Kube.Client.Patch(ctx, sfc, ctrlclient.MergeFrom(base)))
	waitCluster(t, s, "eu-1", "capacity from totalCapacity", func(c *resourcev1alpha1.SFCluster) bool {
		return ptr.To(c.Status.TotalCapacity[corev1.ResourceCPU]).String() == "64" && ptr.To(c.Status.Allocatable[corev1.ResourceCPU]).String() == "6"
	})

	// What kubectl shows.
	out := s.Kube.Kubectl(t, "", "get", "sfclusters", "-n", s.Namespace)
	assert.Regexp(t, `NAME\s+READY\s+VERSION\s+INSTANCES\s+CPU\s+CPU CAPACITY\s+MEMORY\s+MEMORY CAPACITY\s+LIMIT\s+AGE`, out)
	assert.Regexp(t, `eu-1\s+True\s+v1\.\S+\s+0\s+1500m\s+64\s+1Gi\s+12Gi\s+80\s+`, out)

	// A cluster that cannot be reached, and registrations that are wrong,
	// show as not ready with the reason.
	register(t, s, "bad", []byte("not: [a kubeconfig"), nil)
	require.NoError(t, s.Kube.Client.Create(ctx, &resourcev1alpha1.SFCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "nosecret"}, Spec: resourcev1alpha1.SFClusterSpec{SecretRef: "missing"}}))
	for name, want := range map[string]string{
		"bad":      "the kubeconfig in Secret bad-kubeconfig is not valid",
		"nosecret": "the SFCluster's Secret missing does not exist",
	} {
		c := waitCluster(t, s, name, "not ready", func(c *resourcev1alpha1.SFCluster) bool { return readyCondition(c) != nil })
		assert.Equal(t, metav1.ConditionFalse, readyCondition(c).Status)
		assert.Equal(t, "Misconfigured", readyCondition(c).Reason)
		assert.Equal(t, want, readyCondition(c).Message)
		assert.Equal(t, resourcev1alpha1.ClusterUnreachable, c.Status.State)
	}

	// Credentials the cluster refuses, and a user it knows but lets do
	// nothing, show as not ready with the API server's reason.
	stranger, err := clientcmd.Load(eu1.Kubeconfig)
	require.NoError(t, err)
	for _, auth := range stranger.AuthInfos {
		auth.ClientCertificateData, auth.ClientKeyData, auth.Token = nil, nil, "not-a-token-the-cluster-issued"
	}
	strangerKubeconfig, err := clientcmd.Write(*stranger)
	require.NoError(t, err)
	register(t, s, "stranger", strangerKubeconfig, nil)
	register(t, s, "nobody", eu1.KubeconfigOf(t, "nobody"), nil)
	for name, reason := range map[string]string{"stranger": "Unauthorized", "nobody": "Forbidden"} {
		c := waitCluster(t, s, name, "not ready", func(c *resourcev1alpha1.SFCluster) bool { return readyCondition(c) != nil })
		assert.Equal(t, metav1.ConditionFalse, readyCondition(c).Status, name)
		assert.Equal(t, reason, readyCondition(c).Reason, "%s: %s", name, readyCondition(c).Message)
		assert.Equal(t, resourcev1alpha1.ClusterUnreachable, c.Status.State, name)
	}

	// Instances scheduled on it are counted, and hold it.
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "on-eu-1"},
		Spec: osbv1alpha1.SFServiceInstanceSpec{InstanceID: "on-eu-1", ServiceID: s.ServiceID, PlanID: "no-such-plan", ClusterID: "eu-1"}}
	require.NoError(t, s.Kube.Client.Create(ctx, inst))
	waitCluster(t, s, "eu-1", "one instance, held", func(c *resourcev1alpha1.SFCluster) bool {
		return c.Status.ServiceInstanceCount == 1 && len(c.Finalizers) == 1 && c.Finalizers[0] == starter.ClusterFinalizer
	})
	require.NoError(t, s.Kube.Client.Delete(ctx, sfc))
	held := waitCluster(t, s, "eu-1", "deleted and held", func(c *resourcev1alpha1.SFCluster) bool {
		r := readyCondition(c)
		return c.DeletionTimestamp != nil && r != nil && r.ObservedGeneration == c.Generation && len(r.Message) > 0 &&
			assert.ObjectsAreEqual(r.Message, "Kubernetes "+c.Status.KubernetesVersion+", 2 schedulable nodes; deleted, held until its 1 instances are deprovisioned")
	})
	assert.EqualValues(t, 1, held.Status.ServiceInstanceCount)
	// The instance goes (no worker here: its finalizers are taken off).
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), inst))
	ibase := inst.DeepCopy()
	inst.Finalizers = nil
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(ibase)))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(sfc), &resourcev1alpha1.SFCluster{}))
	}, 30*time.Second, 50*time.Millisecond, "the SFCluster goes once its last instance went")

	// A cluster that stops answering.
	register(t, s, "eu-1b", eu1.Kubeconfig, nil)
	waitCluster(t, s, "eu-1b", "ready", func(c *resourcev1alpha1.SFCluster) bool {
		r := readyCondition(c)
		return r != nil && r.Status == metav1.ConditionTrue
	})
	eu1.Stop(t)
	down := waitCluster(t, s, "eu-1b", "unreachable", func(c *resourcev1alpha1.SFCluster) bool {
		r := readyCondition(c)
		return r != nil && r.Status == metav1.ConditionFalse
	})
	assert.Equal(t, "Unreachable", readyCondition(down).Reason)
	assert.Contains(t, readyCondition(down).Message, "reaching the cluster: ")
	assert.Equal(t, resourcev1alpha1.ClusterUnreachable, down.Status.State)
}
