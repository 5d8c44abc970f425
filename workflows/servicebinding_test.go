package workflows_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/quartermaster/qm/activities"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var serviceBindings *activities.ServiceBindings

var (
	accountDB = runs.ServiceBindingTarget{Namespace: "apps", Name: "account-db"}
	projected = sbv1.Projected{APIVersion: "apps/v1", Kind: "Deployment", Workloads: []string{"api", "web"}}
)

func serviceBindingEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.ServiceBindings{})
	return env
}

// TestServiceBindingProjectsThenTakesBack: a ServiceBinding is projected,
// recorded, and waits; deleted, its projection is taken back from every
// workload its status names before its finalizer goes.
func TestServiceBindingProjectsThenTakesBack(t *testing.T) {
	env := serviceBindingEnv()
	var resolves atomic.Int32
	env.OnActivity(serviceBindings.ResolveServiceBinding, mock.Anything, accountDB).Return(func(context.Context, runs.ServiceBindingTarget) (activities.Projection, error) {
		if resolves.Add(1) == 1 {
			return activities.Projection{UID: "sb-1", Generation: 1, Kind: &injected.Kind, Workloads: []string{"api", "web"}, Secret: "creds"}, nil
		}
		return activities.Projection{UID: "sb-1", Deleting: true, Projected: &projected}, nil
	})
	ready := activities.ProjectionOutcome{Generation: 1, Projected: &projected, Secret: "creds"}
	env.OnActivity(serviceBindings.Project, mock.Anything, accountDB, mock.Anything).Return(ready, nil).Once()
	env.OnActivity(serviceBindings.RecordServiceBinding, mock.Anything, accountDB, ready).Return(nil).Once()
	env.OnActivity(serviceBindings.TakeBackProjection, mock.Anything, accountDB, mock.Anything, projected).Return(nil).Once()
	env.OnActivity(serviceBindings.ReleaseServiceBinding, mock.Anything, accountDB).Return(nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalServiceBindingChanged, "") }, time.Second)

	env.ExecuteWorkflow(workflows.ServiceBinding, accountDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	assert.EqualValues(t, 2, resolves.Load())
}

// TestServiceBindingLooksAgainWhenNotReady: a ServiceBinding whose service
// names no Secret yet looks again a minute later without a signal (a
// Provisioned Service of a kind the watcher does not watch).
func TestServiceBindingLooksAgainWhenNotReady(t *testing.T) {
	env := serviceBindingEnv()
	var resolves atomic.Int32
	notReady := &servicebinding.Problem{Reason: "ServiceNotReady", Message: "Database db has no status.binding.name yet", Service: true}
	env.OnActivity(serviceBindings.ResolveServiceBinding, mock.Anything, accountDB).Return(func(context.Context, runs.ServiceBindingTarget) (activities.Projection, error) {
		if resolves.Add(1) == 2 {
			return activities.Projection{Gone: true}, nil
		}
		return activities.Projection{UID: "sb-1", Generation: 1, Problem: notReady}, nil
	})
	env.OnActivity(serviceBindings.Project, mock.Anything, accountDB, mock.Anything).Return(activities.ProjectionOutcome{Generation: 1, Problem: notReady}, nil)
	env.OnActivity(serviceBindings.RecordServiceBinding, mock.Anything, accountDB, mock.Anything).Return(nil)
	start := env.Now()

	env.ExecuteWorkflow(workflows.ServiceBinding, accountDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.EqualValues(t, 2, resolves.Load())
	assert.Equal(t, time.Minute, env.Now().Sub(start).Truncate(time.Minute), "a look a minute")
}
