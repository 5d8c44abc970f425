package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// massFleet provisions n instances of a plan of the "mass" templates
// (context.version 1; extra is more of its spec) with parameters, and
// returns the plan's ID.
func massFleet(t testing.TB, s *testenv.System, n int, extra string, parameters func(i int) string) string {
	t.Helper()
	planID := s.Plan("mass", "  context: {version: \"1\"}\n"+extra, testenv.Templates("mass"))
	testenv.Parallel(t, n, func(i int) error {
		inst := &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%03d", i), Namespace: s.Namespace},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: fmt.Sprintf("m-%03d", i), ServiceID: s.ServiceID, PlanID: planID},
		}
		if p := parameters(i); p != "" {
			inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(p)}
		}
		return s.Kube.Client.Create(context.Background(), inst)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var list osbv1alpha1.SFServiceInstanceList
		require.NoError(c, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
		done := 0
		for _, inst := range list.Items {
			if inst.Status.State == osbv1alpha1.StateSucceeded && inst.Status.AppliedPlanGeneration == 1 {
				done++
			}
		}
		assert.Equal(c, n, done)
	}, max(2*time.Minute, time.Duration(n)*40*time.Millisecond), pollEvery(n), "%d instances provisioned from generation 1", n)
	return planID
}

// newVersion changes the plan's context.version: a new generation.
func newVersion(t testing.TB, s *testenv.System, version string) {
	t.Helper()
	var plan osbv1alpha1.SFPlan
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "mass"}, &plan))
	base := plan.DeepCopy()
	plan.Spec.Context.Raw = []byte(`{"version":"` + version + `"}`)
	require.NoError(t, s.Kube.Client.Patch(context.Background(), &plan, ctrlclient.MergeFrom(base)))
	s.WaitPlanGeneration(plan.Spec.ID, plan.Generation) // the patched plan, as the API server returned it
}

// startMassUpdate starts a run as the admin API does.
func startMassUpdate(t *testing.T, s *testenv.System, req massupdate.Request) client.WorkflowRun {
	t.Helper()
	run, err := s.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: runs.MassUpdateID(req.Name), TaskQueue: runs.TaskQueue,
	}, runs.MassUpdateType, req)
	require.NoError(t, err)
	return run
}

// TestMassUpdateOfAPlanChange: a plan's new generation is rendered into
// each of its instances, each by its own Update run, and a second run
// skips them all.
func TestMassUpdateOfAPlanChange(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	planID := massFleet(t, s, 20, "", func(int) string { return "" })
	newVersion(t, s, "2")

	run := startMassUpdate(t, s, massupdate.Request{Name: s.Namespace + "/v2", Selector: massupdate.Selector{PlanIDs: []string{planID}}, Concurrency: 5})
	var p massupdate.Progress
	require.NoError(t, run.Get(context.Background(), &p))
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, 20, p.Total)
	assert.Equal(t, 20, p.Succeeded)
	for i := range 20 {
		inst, err := s.GetInstance(fmt.Sprintf("m-%03d", i))
		require.NoError(t, err)
		assert.EqualValues(t, 2, inst.Status.AppliedPlanGeneration)
		assert.Equal(t, osbv1alpha1.StateSucceeded, inst.Status.State)
		cm := getConfigMap(t, s, fmt.Sprintf("m-%03d-mass", i))
		assert.Equal(t, "2", cm.Data["version"])
	}

	id := runs.MassUpdateID(s.Namespace + "/v2")
	recorded(t, s.History(id, s.ClosedRun(id, runs.MassUpdateType)), "mass-update")

	run = startMassUpdate(t, s, massupdate.Request{Name: s.Namespace + "/v2-again", Selector: massupdate.Selector{PlanIDs: []string{planID}}})
	require.NoError(t, run.Get(context.Background(), &p))
	assert.Equal(t, massupdate.Progress{State: massupdate.Completed, Total: 20, Skipped: 20, Concurrency: 10, Started: p.Started, Rate: p.Rate}, p)
}

func getConfigMap(t *testing.T, s *testenv.System, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &cm))
	return &cm
}

// pollEvery is how often a test lists n instances: rarely enough that the
// listing does not slow what it waits for.
func pollEvery(n int) time.Duration {
	if n > 500 {
		return 2 * time.Second
	}
	return 200 * time.Millisecond
}
