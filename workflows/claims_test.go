package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/quartermaster/qm/activities"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var claims *activities.Claims

// shopDB is the claim the claim tests follow.
var shopDB = runs.ClaimTarget{Namespace: "apps", Name: "shop-db"}

// claimEnv is a test environment with the claims' activities registered.
func claimEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Claims{})
	return env
}

// settling is Settle's input for shopDB, with the service given.
func settling(given string) any {
	return mock.MatchedBy(func(s activities.Settling) bool { return s.Claim == shopDB && s.Given == given })
}

// TestClaimLooksAgainWhenPending: a Pending claim settles again after five
// minutes without a signal (the safety net for a missed one); a Resolved
// claim waits for a signal alone; a deleted one ends its workflow.
func TestClaimLooksAgainWhenPending(t *testing.T) {
	env := claimEnv()
	start := env.Now()
	var mu sync.Mutex
	var at []time.Duration
	env.OnActivity(claims.Settle, mock.Anything, settling("")).Return(func(context.Context, activities.Settling) (activities.Resolution, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, env.Now().Sub(start))
		switch len(at) {
		case 1:
			return activities.Resolution{State: primazav1alpha1.ClaimPending, ClaimUID: "c-1", Reason: "no Available service of class type=psqlserver"}, nil
		case 2:
			return activities.Resolution{State: primazav1alpha1.ClaimResolved, ClaimUID: "c-1", Service: "db-1", ServiceState: primazav1alpha1.ServiceClaimed}, nil
		default:
			return activities.Resolution{Gone: true, ClaimUID: "c-1"}, nil
		}
	}).Times(3)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "") }, time.Hour)

	env.ExecuteWorkflow(workflows.ServiceClaim, shopDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	require.Len(t, at, 3)
	assert.Equal(t, 5*time.Minute, at[1].Truncate(time.Second), "the Pending claim looks again after five minutes")
	assert.Equal(t, time.Hour, at[2].Truncate(time.Second), "the Resolved claim waits for the signal")
}

// TestClaimAsksTheAllocator: a claim that could take a service asks its
// namespace's allocator (in its step), and settles again when the
// allocator answers, naming the service it gave; the UID it saw goes with
// each step, for a claim that is gone before its workflow sees it again.
func TestClaimAsksTheAllocator(t *testing.T) {
	env := claimEnv()
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB}).Return(activities.Resolution{ClaimUID: "c-1", Wants: true}, nil).Once()
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB, Given: "db-1", UID: "c-1"}).
		Return(activities.Resolution{State: primazav1alpha1.ClaimResolved, ClaimUID: "c-1", Service: "db-1"}, nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "db-1") }, time.Second)
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB, UID: "c-1"}).Return(activities.Resolution{Gone: true}, nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "") }, time.Minute)

	env.ExecuteWorkflow(workflows.ServiceClaim, shopDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// TestClaimLetsGoOfAServiceGivenAsItWent: the allocator's answer that came
// while the claim's last step let go of its services has that service let
// go of too, before the workflow ends.
func TestClaimLetsGoOfAServiceGivenAsItWent(t *testing.T) {
	env := claimEnv()
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB}).Return(activities.Resolution{ClaimUID: "c-1", Wants: true}, nil).Once()
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB, UID: "c-1"}).Return(func(context.Context, activities.Settling) (activities.Resolution, error) {
		env.SignalWorkflow(runs.SignalClaimChanged, "db-1")
		return activities.Resolution{Gone: true, ClaimUID: "c-1"}, nil
	}).Once()
	env.OnActivity(claims.Settle, mock.Anything, activities.Settling{Claim: shopDB, Given: "db-1", UID: "c-1"}).Return(activities.Resolution{Gone: true}, nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "") }, time.Second)

	env.ExecuteWorkflow(workflows.ServiceClaim, shopDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// TestClaimAllocatorPassesTakeEveryRequest: the first request starts a
// pass; those that came meanwhile go together in the next, each claim once
// and in name order, whether a claim asked or the watcher asked for a list
// of new ones. (Give wakes each claim with what it got:
// TestAllocatorWakesItsClaims.)
func TestClaimAllocatorPassesTakeEveryRequest(t *testing.T) {
	env := claimEnv()
	var mu sync.Mutex
	var passes [][]string
	env.OnActivity(claims.Give, mock.Anything, "apps", mock.Anything).Return(func(_ context.Context, _ string, names []string) error {
		mu.Lock()
		defer mu.Unlock()
		passes = append(passes, names)
		return nil
	})
	env.RegisterDelayedCallback(func() {
		for _, name := range []string{"b", "a", "b"} {
			env.SignalWorkflow(runs.SignalClaimWants, name)
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runs.SignalClaimWants, "c")
		env.SignalWorkflow(runs.SignalClaimsWant, []string{"e", "c"})
	}, time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimsWant, []string{"g", "f"}) }, 2*time.Minute)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Hour)

	env.ExecuteWorkflow(workflows.ClaimAllocator, "apps", []string(nil))
	assert.Equal(t, [][]string{{"b"}, {"a", "b"}, {"c"}, {"c", "e"}, {"f", "g"}}, passes)
}
