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
	env.OnActivity(claims.Resolve, mock.Anything, target).Return(func(context.Context, activities.ClaimTarget) (activities.Resolution, error) {
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
