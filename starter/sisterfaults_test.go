package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestSisterClusterGoesAway: an instance whose cluster goes away for a
// while succeeds once it is back; one whose cluster stays away fails at
// the plan's deadline saying why; an instance on another cluster succeeds
// meanwhile, while the first is still away. It runs beside the package's
// other tests: the instances that must succeed have a deadline no loaded
// machine reaches, and the one that must fail is made once its cluster is
// about to go for good, with a deadline of its own.
func TestSisterClusterGoesAway(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, ClusterProbePeriod: 300 * time.Millisecond})
	ctx := context.Background()
	// Bare sisters: the gated plan writes ConfigMaps only, and the
	// cluster's reachability is what the test is about, not its nodes.
	eu1, eu2 := testenv.StartSister(t, 0), testenv.StartSister(t, 0)
	register(t, s, "eu-1", eu1.Kubeconfig, nil)
	register(t, s, "eu-2", eu2.Kubeconfig, nil)
	for _, name := range []string{"eu-1", "eu-2"} {
		waitCluster(t, s, name, "ready", func(c *resourcev1alpha1.SFCluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, "Ready")
		})
	}
	patient := s.Plan("gated", "  maximum_polling_duration: 600\n", testenv.Templates("gated"))
	deadline := s.Plan("deadline", "  maximum_polling_duration: 30\n", testenv.Templates("gated"))
	on := func(name, plan, cluster string) {
		require.NoError(t, s.Kube.Client.Create(ctx, &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: s.ServiceID, PlanID: plan, ClusterID: cluster}}))
		s.WaitInstance(name, "waiting for its gate", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.Description == "waiting for the gate" })
	}
	openGate := func(sister *testenv.Sister, name string) {
		require.NoError(t, sister.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name + "-gate"}}))
	}
	on("back", patient, "eu-1")

	// eu-1 goes away for a while; meanwhile an instance on eu-2 succeeds.
	// Away long enough that a slow machine still provisions the other
	// instance well inside it: the check is of order, not of speed.
	restarted := make(chan error, 1)
	go func() { restarted <- eu1.Restart(15 * time.Second) }()
	on("elsewhere", patient, "eu-2")
	openGate(eu2, "elsewhere")
	s.WaitInstance("elsewhere", "provisioned", testenv.Succeeded(1))
	select {
	case err := <-restarted:
		require.NoError(t, err)
		t.Error("the instance on eu-2 succeeded only once eu-1 was back: it was held up by another cluster")
	default:
	}
	require.NoError(t, <-restarted)
	openGate(eu1, "back")
	s.WaitInstance("back", "provisioned once its cluster is back", testenv.Succeeded(1))

	// eu-1 goes away for good: an instance waiting there fails at its
	// deadline, with the reason.
	on("lost", deadline, "eu-1")
	eu1.Stop(t)
	lost := s.WaitInstance("lost", "failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
	assert.Regexp(t, `^provision failed: check the status kept failing until the plan's maximum_polling_duration ran out \(\d+ attempts\): cluster eu-1: .*connection refused`, lost.Status.Description)
}
