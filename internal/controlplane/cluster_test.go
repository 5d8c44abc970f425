package controlplane_test

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/deploy/samples"
	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func podSpec(cpu string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox:1.37",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
			}},
		},
	}
}

// burst is how many instances of each sample plan at once the embedded
// cluster holds (issue 72's burst).
const burst = 1000

func TestSimulatedNodesAreReadyWithCapacity(t *testing.T) {
	kube := testenv.Kubernetes(t)
	var nodes corev1.NodeList
	require.NoError(t, kube.Client.List(context.Background(), &nodes))
	require.Len(t, nodes.Items, controlplane.DefaultNodes)
	free := corev1.ResourceList{}
	for _, n := range nodes.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		assert.True(t, ready, "node %s is Ready", n.Name)
		for name, q := range n.Status.Allocatable {
			sum := free[name]
			sum.Add(q)
			free[name] = sum
		}
	}
	need := burstNeeds(t)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		have, want := free[name], need[name]
		assert.GreaterOrEqual(t, have.Cmp(want), 0, "the nodes have %s of %s; a burst of %d instances of each sample plan asks for %s", have.String(), name, burst, want.String())
	}
}

// burstNeeds is what burst instances of each of the catalog's sample plans,
// at their default size, ask of the nodes: their pods, with the CPU and
// memory the plan's context gives each.
func burstNeeds(t *testing.T) corev1.ResourceList {
	need := corev1.ResourceList{}
	add := func(name corev1.ResourceName, q resource.Quantity, times int64) {
		sum := need[name]
		for range times {
			sum.Add(q)
		}
		need[name] = sum
	}
	for _, name := range samples.Catalog {
		objs, err := samples.Load(name)
		require.NoError(t, err)
		for _, obj := range objs {
			replicas, found, err := unstructured.NestedInt64(obj.Object, "spec", "context", "replicas")
			require.NoError(t, err)
			if obj.GetKind() != "SFPlan" || !found {
				continue // a plan without workloads
			}
			cpu, _, _ := unstructured.NestedString(obj.Object, "spec", "context", "cpu")
			memory, _, _ := unstructured.NestedString(obj.Object, "spec", "context", "memory")
			add(corev1.ResourceCPU, resource.MustParse(cpu), replicas*burst)
			add(corev1.ResourceMemory, resource.MustParse(memory), replicas*burst)
			add(corev1.ResourcePods, resource.MustParse("1"), replicas*burst)
		}
	}
	require.NotEmpty(t, need, "a sample plan with pods")
	return need
}

// A burst's Services each get an address: the Service range holds far more
// than envtest's 254.
func TestServiceRangeHoldsABurst(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	// The address of the burst's last Service on a range counted from the
	// cluster's first: in the range only when it holds a burst.
	var def corev1.Service
	require.NoError(t, kube.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &def))
	first := net.ParseIP(def.Spec.ClusterIP).To4()
	require.NotNil(t, first, "the kubernetes Service's address %q", def.Spec.ClusterIP)
	last := binary.BigEndian.Uint32(first) + 2*burst
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, last)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "last", Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: ip.String(), Ports: []corev1.ServicePort{{Port: 80}}},
	}
	require.NoError(t, kube.Client.Create(context.Background(), svc), "a Service at %s, %d addresses past the first", ip, 2*burst)
}

func TestDeploymentBecomesAvailable(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: podSpec("100m", corev1.RestartPolicyAlways),
		},
	}
	require.NoError(t, kube.Client.Create(ctx, dep))
	require.Eventually(t, func() bool {
		return kube.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep) == nil && dep.Status.AvailableReplicas == 2
	}, time.Minute, 100*time.Millisecond, "the Deployment's two replicas become available")

	var pods corev1.PodList
	require.NoError(t, kube.Client.List(ctx, &pods, client.InNamespace(ns)))
	require.Len(t, pods.Items, 2)
	for _, p := range pods.Items {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, p.Name)
		assert.NotEmpty(t, p.Spec.NodeName, "the scheduler placed %s", p.Name)
		assert.Equal(t, "default", p.Spec.ServiceAccountName, "ServiceAccount admission gave %s its account", p.Name)
	}

	// A pod that asks for more CPU than any node has is never scheduled.
	huge := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: ns}, Spec: podSpec("200", corev1.RestartPolicyAlways).Spec}
	require.NoError(t, kube.Client.Create(ctx, huge))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, kube.Client.Get(ctx, client.ObjectKeyFromObject(huge), huge))
		i := slices.IndexFunc(huge.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
		require.GreaterOrEqual(c, i, 0, "no PodScheduled condition yet")
		assert.Equal(c, corev1.ConditionFalse, huge.Status.Conditions[i].Status)
		assert.Contains(c, huge.Status.Conditions[i].Message, "Insufficient cpu")
	}, time.Minute, 100*time.Millisecond, "the scheduler reports the pod unschedulable")
}

func TestJobAndCronJobComplete(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
		Spec:       batchv1.JobSpec{Template: podSpec("100m", corev1.RestartPolicyNever)},
	}
	require.NoError(t, kube.Client.Create(ctx, job))
	require.Eventually(t, func() bool {
		return kube.Client.Get(ctx, client.ObjectKeyFromObject(job), job) == nil && job.Status.Succeeded == 1
	}, time.Minute, 100*time.Millisecond, "the Job's pod completes")

	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "every-minute", Namespace: ns},
		Spec: batchv1.CronJobSpec{
			Schedule:    "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podSpec("100m", corev1.RestartPolicyNever)}},
		},
	}
	require.NoError(t, kube.Client.Create(ctx, cron))
	require.Eventually(t, func() bool {
		return kube.Client.Get(ctx, client.ObjectKeyFromObject(cron), cron) == nil && cron.Status.LastSuccessfulTime != nil
	}, 2*time.Minute, 250*time.Millisecond, "the CronJob runs a Job to completion within its first minute")
}

// TestSimulatedImages: a Job's pod with FailingImage fails, and so does its
// Job; a pod with UnpullableImage stays Pending with ErrImagePull; a Job
// whose pod has HangingImage runs out of its deadline.
func TestSimulatedImages(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	failing := podSpec("100m", corev1.RestartPolicyNever)
	failing.Spec.Containers[0].Image = controlplane.FailingImage
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fails", Namespace: ns},
		Spec:       batchv1.JobSpec{Template: failing, BackoffLimit: ptr.To[int32](0)},
	}
	require.NoError(t, kube.Client.Create(ctx, job))
	require.Eventually(t, func() bool {
		return kube.Client.Get(ctx, client.ObjectKeyFromObject(job), job) == nil && job.Status.Failed == 1
	}, time.Minute, 100*time.Millisecond, "the Job's pod fails")

	unpullable := podSpec("100m", corev1.RestartPolicyNever)
	unpullable.Spec.Containers[0].Image = controlplane.UnpullableImage
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unpullable", Namespace: ns}, Spec: unpullable.Spec}
	require.NoError(t, kube.Client.Create(ctx, pod))
	require.Eventually(t, func() bool {
		if kube.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod) != nil || len(pod.Status.ContainerStatuses) == 0 {
			return false
		}
		w := pod.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ErrImagePull"
	}, time.Minute, 100*time.Millisecond, "the pod waits on its image")
	assert.Never(t, func() bool {
		var now corev1.Pod
		return kube.Client.Get(ctx, client.ObjectKeyFromObject(pod), &now) == nil && now.Status.Phase != corev1.PodPending
	}, 2*time.Second, 100*time.Millisecond, "the pod never runs")

	hanging := podSpec("100m", corev1.RestartPolicyNever)
	hanging.Spec.Containers[0].Image = controlplane.HangingImage
	slow := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hangs", Namespace: ns},
		Spec:       batchv1.JobSpec{Template: hanging, BackoffLimit: ptr.To[int32](0), ActiveDeadlineSeconds: ptr.To[int64](3)},
	}
	require.NoError(t, kube.Client.Create(ctx, slow))
	require.Eventually(t, func() bool {
		if kube.Client.Get(ctx, client.ObjectKeyFromObject(slow), slow) != nil {
			return false
		}
		for _, c := range slow.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Reason == batchv1.JobReasonDeadlineExceeded {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the Job runs out of its deadline")
}

func TestNamespaceFinishesDeleting(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content", Namespace: ns}}
	require.NoError(t, kube.Client.Create(ctx, cm))
	require.NoError(t, kube.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(kube.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}))
	}, time.Minute, 100*time.Millisecond, "the namespace controller empties and removes the namespace")
}
