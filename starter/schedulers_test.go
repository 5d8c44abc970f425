package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestSchedulersPlace: each scheduler places 30 instances over three
// sister clusters as it says. Round-robin spreads them 10/10/10, and its
// position outlives a worker restart; least-utilized fills the emptiest
// cluster first; label-selector honours the plan's clusterSelector,
// plan=<id> and plan!=<id>.
func TestSchedulersPlace(t *testing.T) {
	// Beside the package's other parallel tests, not ahead of them: its
	// cases are parallel, each a System of its own over the shared sisters.
	t.Parallel()
	sis := map[string]*testenv.Sister{}
	for i := range 3 {
		sis[fmt.Sprintf("eu-%d", i+1)] = testenv.StartSister(t, 1)
	}
	setUp := func(t *testing.T, scheduler scheduling.Scheduler) *testenv.System {
		s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, ClusterProbePeriod: 300 * time.Millisecond, Scheduler: scheduler, Concurrency: 32})
		for name, sister := range sis {
			register(t, s, name, sister.Kubeconfig, nil)
			waitCluster(t, s, name, "ready", func(c *resourcev1alpha1.SFCluster) bool {
				return meta.IsStatusConditionTrue(c.Status.Conditions, "Ready")
			})
		}
		return s
	}
	provision := func(t *testing.T, s *testenv.System, prefix, plan string, n int) map[string]int {
		testenv.Parallel(t, n, func(i int) error {
			_, err := s.CreateInstance(fmt.Sprintf("%s-%02d", prefix, i), plan, "")
			return err
		})
		on := map[string]int{}
		for i := range n {
			on[s.WaitInstance(fmt.Sprintf("%s-%02d", prefix, i), "provisioned", testenv.Succeeded(2)).Spec.ClusterID]++
		}
		return on
	}

	t.Run("round-robin", func(t *testing.T) {
		s := setUp(t, scheduling.RoundRobin)
		plan := s.Plan("instant", "", testenv.Templates("instant"))
		first := provision(t, s, "a", plan, 14)
		// A new worker goes on from where the last decision left off.
		s.StopWorker()
		s.StartWorker()
		second := provision(t, s, "b", plan, 16)
		total := map[string]int{}
		for _, m := range []map[string]int{first, second} {
			for c, n := range m {
				total[c] += n
			}
		}
		assert.Equal(t, map[string]int{"eu-1": 10, "eu-2": 10, "eu-3": 10}, total)
	})

	t.Run("least-utilized", func(t *testing.T) {
		s := setUp(t, scheduling.LeastUtilized)
		plan := s.Plan("instant", "", testenv.Templates("instant"))
		// eu-1 already has six instances.
		for i := range 6 {
			inst := &osbv1alpha1.SFServiceInstance{}
			inst.Namespace, inst.Name = s.Namespace, fmt.Sprintf("old-%d", i)
			inst.Spec = osbv1alpha1.SFServiceInstanceSpec{InstanceID: inst.Name, ServiceID: s.ServiceID, PlanID: plan, ClusterID: "eu-1"}
			require.NoError(t, s.Kube.Client.Create(context.Background(), inst))
			s.WaitInstance(inst.Name, "provisioned", testenv.Succeeded(1))
		}
		// The first twelve new ones fill eu-2 and eu-3 up to it; then all
		// three grow evenly.
		assert.Equal(t, map[string]int{"eu-2": 6, "eu-3": 6}, provision(t, s, "a", plan, 12))
		assert.Equal(t, map[string]int{"eu-1": 6, "eu-2": 6, "eu-3": 6}, provision(t, s, "b", plan, 18))
	})

	t.Run("label-selector", func(t *testing.T) {
		s := setUp(t, scheduling.LabelSelector)
		selector := func(op string) string {
			return "  - action: clusterSelector\n    type: gotemplate\n    content: |\n      plan" + op + "{{ .plan.spec.id }}\n" + testenv.Templates("instant")
		}
		gold := s.Plan("gold", "", selector("="))
		other := s.Plan("other", "", selector("!="))
		sfc := &resourcev1alpha1.SFCluster{}
		require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "eu-1"}, sfc))
		base := sfc.DeepCopy()
		sfc.Labels = map[string]string{"plan": gold}
		require.NoError(t, s.Kube.Client.Patch(context.Background(), sfc, ctrlclient.MergeFrom(base)))
		assert.Equal(t, map[string]int{"eu-1": 15}, provision(t, s, "g", gold, 15), "plan=%s: the gold cluster only", gold)
		spread := provision(t, s, "o", other, 15)
		assert.Zero(t, spread["eu-1"], "plan!=%s: never the gold cluster", gold)
		assert.InDelta(t, spread["eu-2"], spread["eu-3"], 1, "ties go to the least utilized: %v", spread)
	})
}
