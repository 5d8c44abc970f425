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
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var usages *activities.BindingUsages

var (
	webDB    = runs.UsageTarget{Namespace: "apps", Name: "web-db"}
	injected = activities.Injected{Kind: sc.UsageKindSnapshot{Name: "deployment", Resource: sc.ResourceReference{Group: "apps", Version: "v1", Kind: "Deployment"},
		LabelsPath: "spec.template.metadata.labels"}, Workload: "web"}
)

func usageEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.BindingUsages{})
	return env
}

// TestBindingUsageInjectsThenRemoves: a usage is injected, recorded, and
// waits; deleted, its injection is removed (by the snapshot in its
// status) before its finalizer goes.
func TestBindingUsageInjectsThenRemoves(t *testing.T) {
	env := usageEnv()
	var resolves atomic.Int32
	env.OnActivity(usages.ResolveUsage, mock.Anything, webDB).Return(func(context.Context, runs.UsageTarget) (activities.Usage, error) {
		if resolves.Add(1) == 1 {
			return activities.Usage{UID: "u-1", Generation: 1, Kind: &injected.Kind, Workload: "web", Binding: "db", Secret: "creds"}, nil
		}
		return activities.Usage{UID: "u-1", Deleting: true, Injected: &injected}, nil
	})
	ready := activities.UsageOutcome{Generation: 1, Injected: &injected, Secret: "creds", Env: []string{"user"}}
	env.OnActivity(usages.Inject, mock.Anything, webDB, mock.Anything).Return(ready, nil).Once()
	env.OnActivity(usages.RecordUsage, mock.Anything, webDB, ready).Return(nil).Once()
	env.OnActivity(usages.RemoveInjection, mock.Anything, webDB, mock.Anything, injected).Return(nil).Once()
	env.OnActivity(usages.ReleaseUsage, mock.Anything, webDB).Return(nil).Once()
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalUsageChanged, "") }, time.Second)

	env.ExecuteWorkflow(workflows.BindingUsage, webDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	assert.EqualValues(t, 2, resolves.Load())
}

// TestBindingUsageLooksAgainWhenNotReady: a usage that is not Ready looks
// again after a minute without a signal (what it waits for may be
// something nothing watches); a Ready one waits for a signal only.
func TestBindingUsageLooksAgainWhenNotReady(t *testing.T) {
	env := usageEnv()
	var resolves atomic.Int32
	problem := &activities.UsageProblem{State: sc.UsageFailed, Reason: "Forbidden", Message: "Quartermaster may not patch Deployment"}
	env.OnActivity(usages.ResolveUsage, mock.Anything, webDB).Return(func(context.Context, runs.UsageTarget) (activities.Usage, error) {
		if resolves.Add(1) == 3 {
			return activities.Usage{Gone: true}, nil
		}
		return activities.Usage{UID: "u-1", Generation: 1, Kind: &injected.Kind, Workload: "web"}, nil
	})
	env.OnActivity(usages.Inject, mock.Anything, webDB, mock.Anything).Return(activities.UsageOutcome{Generation: 1, Problem: problem}, nil)
	env.OnActivity(usages.RecordUsage, mock.Anything, webDB, mock.Anything).Return(nil)
	start := env.Now()

	env.ExecuteWorkflow(workflows.BindingUsage, webDB)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.EqualValues(t, 3, resolves.Load(), "two timed looks, then it is gone")
	assert.Equal(t, 2*time.Minute, env.Now().Sub(start).Truncate(time.Minute), "a look a minute")
}

// TestBindingUsageContinuesAsNew: the history stays bounded: once Temporal
// suggests it, a usage continues as new after its pass.
func TestBindingUsageContinuesAsNew(t *testing.T) {
	env := usageEnv()
	ready := activities.UsageOutcome{Generation: 1, Injected: &injected, Secret: "creds"}
	env.OnActivity(usages.ResolveUsage, mock.Anything, webDB).Return(activities.Usage{UID: "u-1", Generation: 1, Kind: &injected.Kind, Workload: "web"}, nil)
	env.OnActivity(usages.Inject, mock.Anything, webDB, mock.Anything).Return(ready, nil)
	env.OnActivity(usages.RecordUsage, mock.Anything, webDB, ready).Return(nil)
	for i := 1; i <= 3; i++ {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalUsageChanged, "") }, time.Duration(i)*time.Second)
	}
	// As Temporal does once the history grows long.
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 2500*time.Millisecond)

	env.ExecuteWorkflow(workflows.BindingUsage, webDB)
	require.True(t, env.IsWorkflowCompleted())
	var cont *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &cont)
	assert.Equal(t, runs.BindingUsageType, cont.WorkflowType.Name)
}
