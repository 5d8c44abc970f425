package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// sisters starts n sister clusters, registers them as eu-1, eu-2, … and
// waits until the watcher finds them ready.
func sisters(t *testing.T, s *testenv.System, n int) map[string]*testenv.Sister {
	t.Helper()
	out := map[string]*testenv.Sister{}
	for i := range n {
		name := fmt.Sprintf("eu-%d", i+1)
		out[name] = testenv.StartSister(t, 1)
		register(t, s, name, out[name].Kubeconfig, nil)
	}
	for name := range out {
		waitCluster(t, s, name, "ready", func(c *resourcev1alpha1.SFCluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, "Ready")
		})
	}
	return out
}

// exists says whether the object named name of obj's type is in cluster c.
func exists(t *testing.T, c *testenv.Cluster, namespace, name string, obj ctrlclient.Object) bool {
	t.Helper()
	err := c.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: namespace, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	return err == nil
}

// TestProvisionIntoSisterClusters: under least-utilized, instances provisioned
// at once spread evenly over two sister clusters; each one's objects,
// registry and bindings' credentials are in its cluster only, its status
// and an event say why it went there, and deprovision removes them there.
func TestProvisionIntoSisterClusters(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true, ClusterProbePeriod: 300 * time.Millisecond,
		Scheduler: scheduling.LeastUtilized})
	ctx := context.Background()
	sis := sisters(t, s, 2)
	plan := s.Plan("instant", "", testenv.Templates("instant"))

	const n = 8
	testenv.Parallel(t, n, func(i int) error {
		_, err := s.CreateInstance(fmt.Sprintf("db-%d", i), plan, "")
		return err
	})
	count := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("db-%d", i)
		inst := s.WaitInstance(name, "provisioned", testenv.Succeeded(2))
		count[inst.Spec.ClusterID]++
		c := meta.FindStatusCondition(inst.Status.Conditions, activities.ConditionScheduled)
		require.NotNil(t, c, "the status says why %s is where it is", name)
		assert.Regexp(t, `^scheduled on `+inst.Spec.ClusterID+`: \d instances \(eu-\d: another fits better: \d instances\)$`, c.Message)
		for cluster, sister := range sis {
			here := cluster == inst.Spec.ClusterID
			assert.Equal(t, here, exists(t, sister.Cluster, s.Namespace, name+"-db", &corev1.ConfigMap{}), "%s's ConfigMap in %s", name, cluster)
			assert.Equal(t, here, exists(t, sister.Cluster, s.Namespace, "qm-instance-"+name, &corev1.Secret{}), "%s's registry in %s", name, cluster)
		}
		assert.False(t, exists(t, s.Kube, s.Namespace, name+"-db", &corev1.ConfigMap{}), "nothing of %s in the cluster Quartermaster runs in", name)
		assert.False(t, exists(t, s.Kube, s.Namespace, "qm-instance-"+name, &corev1.Secret{}))
	}
	assert.Equal(t, map[string]int{"eu-1": n / 2, "eu-2": n / 2}, count, "least-utilized spreads them evenly")

	recorded(t, s.History(runs.WorkflowID(lifecycle.InstanceTarget(inst0(t, s))), s.ClosedRun(runs.WorkflowID(lifecycle.InstanceTarget(inst0(t, s))),
		runs.WorkflowType(lifecycle.OpProvision))), "provision-scheduled")

	// To OSB, the provision is the last operation, although writing the
	// cluster made a second generation.
	s.Expect(http.MethodGet, "/v2/service_instances/db-0/last_operation?operation=provision", "", http.StatusOK, `{"state": "succeeded", "description": "ready"}`)

	// The decision is an event on the instance.
	var events corev1.EventList
	require.Eventually(t, func() bool {
		return s.Kube.Client.List(ctx, &events, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingFields{"reason": "Scheduled"}) == nil && len(events.Items) == n
	}, 10*time.Second, 50*time.Millisecond, "one Scheduled event per instance")

	// A binding's credentials are in the instance's cluster; unbinding and
	// deprovisioning remove everything there.
	inst, err := s.GetInstance("db-0")
	require.NoError(t, err)
	home := sis[inst.Spec.ClusterID].Cluster
	b := s.Bind("app-0", "db-0", plan)
	require.Eventually(t, func() bool {
		return s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b) == nil && b.Status.State == osbv1alpha1.StateSucceeded
	}, 30*time.Second, 50*time.Millisecond, "bound")
	assert.True(t, exists(t, home, s.Namespace, "qm-credentials-app-0", &corev1.Secret{}), "the credentials are in the instance's cluster")
	assert.False(t, exists(t, s.Kube, s.Namespace, "qm-credentials-app-0", &corev1.Secret{}))
	// The OSB API answers a bind with the credentials from there.
	s.Expect(http.MethodPut, "/v2/service_instances/db-0/service_bindings/osb-0", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodGet, "/v2/service_instances/db-0/service_bindings/osb-0", "", http.StatusOK, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/db-0/service_bindings/osb-0?service_id=%s&plan_id=%s", s.ServiceID, plan), "", http.StatusOK, `{}`)
	require.NoError(t, s.Kube.Client.Delete(ctx, b))
	s.WaitGone(b)
	assert.False(t, exists(t, home, s.Namespace, "qm-credentials-app-0", &corev1.Secret{}), "unbind removed the credentials")
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	assert.False(t, exists(t, home, s.Namespace, "db-0-db", &corev1.ConfigMap{}), "deprovision removed the objects there")
	assert.False(t, exists(t, home, s.Namespace, "qm-instance-db-0", &corev1.Secret{}), "and the registry")

	// A binding keeps its cluster: with its instance removed by force
	// (finalizer stripped, no deprovision), unbinding still finds its
	// credentials there.
	inst, err = s.GetInstance("db-1")
	require.NoError(t, err)
	home = sis[inst.Spec.ClusterID].Cluster
	b = s.Bind("app-1", "db-1", plan)
	require.Eventually(t, func() bool {
		return s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b) == nil && b.Status.State == osbv1alpha1.StateSucceeded
	}, 30*time.Second, 50*time.Millisecond, "bound")
	assert.Equal(t, inst.Spec.ClusterID, b.Status.ClusterID, "the binding's status names its cluster")
	require.True(t, exists(t, home, s.Namespace, "qm-credentials-app-1", &corev1.Secret{}))
	base := inst.DeepCopy()
	inst.Finalizers = nil
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	require.NoError(t, s.Kube.Client.Delete(ctx, b))
	s.WaitGone(b)
	assert.False(t, exists(t, home, s.Namespace, "qm-credentials-app-1", &corev1.Secret{}), "the unbind of a gone instance removed its credentials there")

	// Templates see the SFCluster the instance is scheduled on: its name,
	// labels and spec.
	for name := range sis {
		var sfc resourcev1alpha1.SFCluster
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &sfc))
		base := sfc.DeepCopy()
		sfc.Labels = map[string]string{"region": name + "-region"}
		require.NoError(t, s.Kube.Client.Patch(ctx, &sfc, ctrlclient.MergeFrom(base)))
	}
	where := s.Plan("where", "", `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-where}
      data:
        cluster: {{ .cluster.metadata.name | quote }}
        region: {{ .cluster.metadata.labels.region | quote }}
        secret: {{ .cluster.spec.secretRef | quote }}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded}`)
	s.Instance("where-1", where, "")
	placed := s.WaitInstance("where-1", "provisioned", testenv.Succeeded(2)).Spec.ClusterID
	var cm corev1.ConfigMap
	require.NoError(t, sis[placed].Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "where-1-where"}, &cm))
	assert.Equal(t, map[string]string{"cluster": placed, "region": placed + "-region", "secret": placed + "-kubeconfig"}, cm.Data)
	// So do they when the instance's creator named the cluster, and
	// nothing was scheduled.
	named := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "where-2", Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: "where-2", ServiceID: s.ServiceID, PlanID: where, ClusterID: placed},
	}
	require.NoError(t, s.Kube.Client.Create(ctx, named))
	s.WaitInstance("where-2", "provisioned", testenv.Succeeded(1))
	require.NoError(t, sis[placed].Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "where-2-where"}, &cm))
	assert.Equal(t, map[string]string{"cluster": placed, "region": placed + "-region", "secret": placed + "-kubeconfig"}, cm.Data)
}

// inst0 is the instance db-0.
func inst0(t *testing.T, s *testenv.System) *osbv1alpha1.SFServiceInstance {
	t.Helper()
	inst, err := s.GetInstance("db-0")
	require.NoError(t, err)
	return inst
}
