package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// limitCluster gives an SFCluster an autoscaler's maximum of 10 CPUs and a
// scheduling limit of 50 %: room for five instances of one CPU.
func limitCluster(t *testing.T, s *testenv.System, name string) {
	t.Helper()
	sfc := &resourcev1alpha1.SFCluster{}
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, sfc))
	base := sfc.DeepCopy()
	sfc.Spec.TotalCapacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}
	sfc.Spec.SchedulingLimitPercentage = ptr.To[int32](50)
	require.NoError(t, s.Kube.Client.Patch(context.Background(), sfc, ctrlclient.MergeFrom(base)))
}

// placement counts the instances scheduled on each cluster, and those that
// wait with why.
func placement(s *testenv.System) (map[string]int, map[string]string, error) {
	var list osbv1alpha1.SFServiceInstanceList
	if err := s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)); err != nil {
		return nil, nil, err
	}
	on, waiting := map[string]int{}, map[string]string{}
	for _, in := range list.Items {
		if in.Spec.ClusterID != "" {
			on[in.Spec.ClusterID]++
			continue
		}
		if c := meta.FindStatusCondition(in.Status.Conditions, activities.ConditionScheduled); c != nil && c.Status == metav1.ConditionFalse {
			waiting[in.Name] = c.Message
		}
	}
	return on, waiting, nil
}

// total is how many instances a placement has put on clusters.
func total(on map[string]int) int {
	n := 0
	for _, c := range on {
		n += c
	}
	return n
}

// TestCapacitySchedulingNeverOvershoots: 50 provisions at once against two
// clusters with room for 10 under their limit: exactly 10 are scheduled,
// 40 wait saying why, and no cluster goes over its limit, even once the
// pods replace the reservations. Two workers decide side by side, so their
// turns race on the ledger as two replicas' would. Deprovisioning five
// schedules five of those waiting; a new cluster takes five more.
func TestCapacitySchedulingNeverOvershoots(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, ClusterProbePeriod: 300 * time.Millisecond,
		Scheduler: scheduling.Capacity, Concurrency: 64})
	s.StartAnotherWorker()
	ctx := context.Background()
	sis := sisters(t, s, 2)
	for name := range sis {
		limitCluster(t, s, name)
	}
	plan := s.Plan("cpu", "  maximum_polling_duration: 600\n  context: {requests: {cpu: \"1\"}}\n", testenv.Templates("cpu"))

	const n = 50
	testenv.Parallel(t, n, func(i int) error {
		_, err := s.CreateInstance(fmt.Sprintf("c-%02d", i), plan, "")
		return err
	})
	settled := func(want int, wantWaiting int) map[string]int {
		t.Helper()
		var on map[string]int
		var waiting map[string]string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var err error
			on, waiting, err = placement(s)
			require.NoError(c, err)
			assert.Equal(c, want, total(on), "scheduled")
			assert.Len(c, waiting, wantWaiting, "waiting")
		}, 2*time.Minute, 200*time.Millisecond, "%d scheduled and %d waiting", want, wantWaiting)
		for name, why := range waiting {
			assert.Regexp(t, `^no cluster qualifies: eu-1: cpu \d+% > limit 50%; eu-2: cpu \d+% > limit 50%`, why, "why %s waits", name)
		}
		return on
	}
	assert.Equal(t, map[string]int{"eu-1": 5, "eu-2": 5}, settled(10, 40))

	// Once the pods run and the reservations end, nothing more fits: still
	// 10, and each cluster's pods request at most its limit.
	for name, sister := range sis {
		require.Eventually(t, func() bool {
			var pods corev1.PodList
			return sister.Client.List(ctx, &pods, ctrlclient.InNamespace(s.Namespace)) == nil && len(pods.Items) == 5
		}, time.Minute, 200*time.Millisecond, "five pods in %s", name)
	}
	// Past the reservations' grace and through several probes, none of the
	// 40 waiting is scheduled.
	assert.Never(t, func() bool {
		on, _, err := placement(s)
		return err == nil && total(on) != 10
	}, 15*time.Second, 300*time.Millisecond, "an eleventh instance is scheduled once the reservations end")
	assert.Equal(t, map[string]int{"eu-1": 5, "eu-2": 5}, settled(10, 40))
	for name := range sis {
		sfc := waitCluster(t, s, name, "probed", func(*resourcev1alpha1.SFCluster) bool { return true })
		assert.LessOrEqual(t, sfc.Status.Requests.Cpu().MilliValue(), int64(5000), "%s stays under its limit", name)
	}

	// Five deprovisioned: five of those waiting take their place.
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(t, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)))
	removed := 0
	for i := range list.Items {
		if in := &list.Items[i]; in.Spec.ClusterID == "eu-1" && removed < 5 {
			require.NoError(t, s.Kube.Client.Delete(ctx, in))
			s.WaitGone(in)
			removed++
		}
	}
	assert.Equal(t, map[string]int{"eu-1": 5, "eu-2": 5}, settled(10, 35))

	// A new cluster takes five more.
	eu3 := testenv.StartSister(t, 1)
	register(t, s, "eu-3", eu3.Kubeconfig, nil)
	limitCluster(t, s, "eu-3")
	assert.Equal(t, map[string]int{"eu-1": 5, "eu-2": 5, "eu-3": 5}, settled(15, 30))
	// One that waited and was then scheduled, for the replay test.
	require.NoError(t, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)))
	var waited lifecycle.Target
	for i := range list.Items {
		if list.Items[i].Spec.ClusterID == "eu-3" {
			waited = lifecycle.InstanceTarget(&list.Items[i])
		}
	}
	require.NotEmpty(t, waited.Name)
	recorded(t, s.History(runs.WorkflowID(waited), s.ClosedRun(runs.WorkflowID(waited), runs.WorkflowType(lifecycle.OpProvision))), "provision-waited-for-cluster")

	// Those still waiting can be deleted: their provisions end, and the
	// instances go.
	_, waiting, err := placement(s)
	require.NoError(t, err)
	for name := range waiting {
		require.NoError(t, s.Kube.Client.Delete(ctx, &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}))
	}
	for name := range waiting {
		s.WaitGone(&osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}})
	}
}
