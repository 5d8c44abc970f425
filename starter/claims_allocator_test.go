package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestAllocatorWakesItsClaims: a pass of a namespace's allocator (Give)
// wakes the claim it gave a service to, starting its workflow, as it does
// for a new claim (the watcher asks the allocator for those), and the
// claim resolves with it. And a claim gone before its workflow ever read
// it does not keep the service a pass gave it: its first step lets go of
// it. No watcher runs, so that only the test asks and starts.
func TestAllocatorWakesItsClaims(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true})
	ctx := context.Background()
	// Services Available at once: no watcher runs their health checks.
	for _, name := range []string{"db-1", "db-2"} {
		dbService(t, s, name, "psqlserver", name+".example")
		svc := getService(t, s, name)
		base := svc.DeepCopy()
		svc.Status.State = primazav1alpha1.ServiceAvailable
		require.NoError(t, s.Kube.Client.Status().Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	}
	s.Create(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": "` + s.Namespace + `"}, "stringData": {"password": "p"}}`)
	claims := &activities.Claims{Client: s.Kube.Client, Temporal: s.Temporal}

	// A new claim, with no workflow yet: the pass gives it a service and
	// starts its workflow, which resolves it.
	dbClaim(t, s, "app")
	var suite testsuite.WorkflowTestSuite
	pass := suite.NewTestActivityEnvironment()
	pass.RegisterActivity(claims)
	_, err := pass.ExecuteActivity(claims.Give, s.Namespace, []string{"app"})
	require.NoError(t, err)
	claim := waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, getClaimService(t, s, "app"))
	held := getService(t, s, claim.Status.RegisteredService)
	assert.Equal(t, &primazav1alpha1.ClaimReference{Name: "app", UID: claim.UID}, held.Status.ClaimRef)
	assert.Equal(t, map[string]string{"host": held.Name + ".example", "password": "p", "type": "psqlserver", "provider": "aws"}, binding(t, s, "app"))

	// A claim deleted once a pass had given it the other service, before
	// its workflow read it: its first step lets the service go.
	other := "db-1"
	if held.Name == other {
		other = "db-2"
	}
	svc := getService(t, s, other)
	base := svc.DeepCopy()
	svc.Status.State, svc.Status.ClaimRef = primazav1alpha1.ServiceClaimed, &primazav1alpha1.ClaimReference{Name: "gone", UID: "0d1c6e1e-gone"}
	require.NoError(t, s.Kube.Client.Status().Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	res, err := claims.Settle(ctx, activities.Settling{Claim: runs.ClaimTarget{Namespace: s.Namespace, Name: "gone"}, Given: other})
	require.NoError(t, err)
	assert.True(t, res.Gone)
	svc = getService(t, s, other)
	assert.Equal(t, primazav1alpha1.ServiceAvailable, svc.Status.State)
	assert.Nil(t, svc.Status.ClaimRef, "%s is held by no one", other)
}

// getClaimService waits until the claim names the service it holds, and
// returns that name.
func getClaimService(t *testing.T, s *testenv.System, name string) string {
	t.Helper()
	var service string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		service = getClaim(c, s, name).Status.RegisteredService
		assert.NotEmpty(c, service)
	}, 30*time.Second, 50*time.Millisecond, "claim %s names a service", name)
	return service
}
