package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var driftChecks *activities.Drift

// TestDriftChecksLoop: passes over contiguous windows at the tick the
// pass asks for; a pass that failed is not counted, so the next window
// covers it; the loop continues as new when Temporal suggests it, with
// where it was and what it found.
func TestDriftChecksLoop(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Drift{})
	var mu sync.Mutex
	var got []activities.DriftPass
	env.OnActivity(driftChecks.CheckInstances, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DriftPass) (activities.DriftPassed, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, in)
			if len(got) == 2 {
				return activities.DriftPassed{}, temporal.NewNonRetryableApplicationError("the cache is away", "Test", nil)
			}
			return activities.DriftPassed{Instances: 2, Checked: 1, Drifted: []string{"ns/a: Service ns/a: deleted"}, Tick: 3 * time.Second}, nil
		})
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 14*time.Second)
	env.ExecuteWorkflow(workflows.DriftChecks, runs.DriftChecksInput{Shard: 2})

	var next *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &next)
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(got), 4)
	start := got[0].From
	// The first window is the first tick's; the failed second one is
	// covered again by the third.
	assert.Equal(t, 5*time.Second, got[0].To.Sub(start))
	assert.Equal(t, got[0].To, got[1].From)
	assert.Equal(t, got[0].To, got[2].From, "the failed pass's window is covered by the next")
	assert.Equal(t, got[2].To, got[3].From)
	assert.Equal(t, 3*time.Second, got[3].To.Sub(got[3].From), "at the tick the pass asked for")
	for _, p := range got {
		assert.Equal(t, 2, p.Shard)
	}
	var in runs.DriftChecksInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(next.Input, &in))
	assert.Equal(t, 2, in.Shard)
	assert.Equal(t, got[len(got)-1].To, in.Last, "the next run starts where this one ended")
	assert.Equal(t, 3*time.Second, in.Tick)
	require.NotEmpty(t, in.Recent)
	assert.Contains(t, in.Recent[0], "ns/a: Service ns/a: deleted")
}

// TestRepair: a Repair run applies the templates again when the drift is
// still there and records the outcome; applies nothing when it went; and
// when the apply fails, records the failure on the instance and fails.
func TestRepair(t *testing.T) {
	target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "ns", Name: "a"}
	var ops *activities.Operations
	cases := []struct {
		name     string
		scope    activities.RepairScope
		applyErr error
		applies  bool
		failure  string
		want     workflows.RepairResult
		wantErr  string
	}{
		{name: "repaired", scope: activities.RepairScope{Found: "Service ns/a: deleted"}, applies: true,
			want: workflows.RepairResult{State: osbv1alpha1.StateSucceeded, Repaired: "Service ns/a: deleted", Outcome: "recorded"}},
		{name: "gone before", scope: activities.RepairScope{Skipped: "the drift went before the repair"},
			want: workflows.RepairResult{State: osbv1alpha1.StateSucceeded, Skipped: "the drift went before the repair"}},
		{name: "apply fails", scope: activities.RepairScope{Found: "Service ns/a: deleted"}, applies: true,
			applyErr: temporal.NewNonRetryableApplicationError("Service ns/a already exists and was not made by Quartermaster", activities.ErrApply, nil),
			failure:  "Service ns/a already exists and was not made by Quartermaster", wantErr: "not made by Quartermaster"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Drift{})
			env.RegisterActivity(&activities.Operations{})
			env.OnActivity(driftChecks.RepairScope, mock.Anything, target).Return(c.scope, nil).Once()
			if c.applies {
				env.OnActivity(ops.ApplyTemplates, mock.Anything, target, lifecycle.OpUpdate).Return([]osbv1alpha1.Source{}, c.applyErr).Once()
				env.OnActivity(driftChecks.RepairDone, mock.Anything, target, c.scope.Found, c.failure).Return("recorded", nil).Once()
			}
			env.ExecuteWorkflow(workflows.Repair, target)
			require.True(t, env.IsWorkflowCompleted())
			if c.wantErr != "" {
				require.Error(t, env.GetWorkflowError())
				assert.Contains(t, env.GetWorkflowError().Error(), c.wantErr)
			} else {
				require.NoError(t, env.GetWorkflowError())
				var got workflows.RepairResult
				require.NoError(t, env.GetWorkflowResult(&got))
				assert.Equal(t, c.want, got)
			}
			env.AssertExpectations(t)
		})
	}
}
