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

// TestClaimLooksAgainWhenPending: a Pending claim resolves again after five
// minutes without a signal (the safety net for a missed one); a Resolved
// claim waits for a signal alone.
func TestClaimLooksAgainWhenPending(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Claims{})
	target := activities.ClaimTarget{Namespace: "apps", Name: "shop-db"}
	start := env.Now()
	var mu sync.Mutex
	var at []time.Duration
	env.OnActivity(claims.Look, mock.Anything, target, mock.Anything).Return(func(context.Context, activities.ClaimTarget, string) (activities.Resolution, error) {
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
	})
	env.OnActivity(claims.Bind, mock.Anything, target, "db-1").Return("shop-db", nil).Once()
	env.OnActivity(claims.Record, mock.Anything, target, mock.Anything, mock.Anything).Return(nil).Twice()
	env.OnActivity(claims.Release, mock.Anything, target, mock.Anything).Return(nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "") }, time.Hour)

	env.ExecuteWorkflow(workflows.ServiceClaim, target)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	require.Len(t, at, 3)
	assert.Equal(t, 5*time.Minute, at[1].Truncate(time.Second), "the Pending claim looks again after five minutes")
	assert.Equal(t, time.Hour, at[2].Truncate(time.Second), "the Resolved claim waits for the signal")
}

// TestClaimAsksTheAllocator: a claim that could take a service asks its
// namespace's allocator, and looks again when the allocator answers,
// naming the service it gave.
func TestClaimAsksTheAllocator(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Claims{})
	target := activities.ClaimTarget{Namespace: "apps", Name: "shop-db"}
	env.OnActivity(claims.Look, mock.Anything, target, "").Return(activities.Resolution{ClaimUID: "c-1", Wants: true}, nil).Once()
	env.OnActivity(claims.Ask, mock.Anything, target).Return(nil).Once()
	env.OnActivity(claims.Look, mock.Anything, target, "db-1").
		Return(activities.Resolution{State: primazav1alpha1.ClaimResolved, ClaimUID: "c-1", Service: "db-1"}, nil).Once()
	env.OnActivity(claims.Bind, mock.Anything, target, "db-1").Return("shop-db", nil).Once()
	env.OnActivity(claims.Record, mock.Anything, target, mock.Anything, "shop-db").Return(nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "db-1") }, time.Second)
	env.OnActivity(claims.Look, mock.Anything, target, "").Return(activities.Resolution{Gone: true, ClaimUID: "c-1"}, nil).Once()
	env.OnActivity(claims.Release, mock.Anything, target, mock.Anything).Return(nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimChanged, "") }, time.Minute)

	env.ExecuteWorkflow(workflows.ServiceClaim, target)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// TestClaimAllocatorPassesTakeEveryRequest: the first request starts a
// pass; those that came meanwhile go together in the next, each claim once
// and in name order; and each claim is woken with what it got.
func TestClaimAllocatorPassesTakeEveryRequest(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Claims{})
	var mu sync.Mutex
	var passes [][]string
	env.OnActivity(claims.Allocate, mock.Anything, "apps", mock.Anything).Return(func(_ context.Context, _ string, names []string) ([]activities.Allocation, error) {
		mu.Lock()
		defer mu.Unlock()
		passes = append(passes, names)
		out := make([]activities.Allocation, len(names))
		for i, n := range names {
			out[i] = activities.Allocation{Claim: n, Service: "db-for-" + n}
		}
		return out, nil
	})
	woken := map[string]string{}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", runs.SignalClaimChanged, mock.Anything).Return(
		func(_, workflowID, _, _ string, arg any) error {
			mu.Lock()
			defer mu.Unlock()
			woken[workflowID] = arg.(string)
			return nil
		})
	env.RegisterDelayedCallback(func() {
		for _, name := range []string{"b", "a", "b"} {
			env.SignalWorkflow(runs.SignalClaimWants, name)
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalClaimWants, "c") }, time.Minute)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Hour)

	env.ExecuteWorkflow(workflows.ClaimAllocator, "apps", []string(nil))
	assert.Equal(t, [][]string{{"b"}, {"a", "b"}, {"c"}}, passes)
	assert.Equal(t, map[string]string{runs.ClaimID("apps", "a"): "db-for-a", runs.ClaimID("apps", "b"): "db-for-b", runs.ClaimID("apps", "c"): "db-for-c"}, woken)
}
