package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var (
	ops      *activities.Operations
	instance = lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "tenants", Name: "db-1"}
)

func opsEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Operations{})
	t.Cleanup(func() { env.AssertExpectations(t) })
	return env
}

// finished captures the outcome the workflow writes.
func finished(env *testsuite.TestWorkflowEnvironment, op lifecycle.Operation) *activities.Outcome {
	var got activities.Outcome
	env.OnActivity(ops.Finish, mock.Anything, instance, op, mock.Anything, mock.Anything, mock.Anything).
		Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation, _ int64, o activities.Outcome, _ []osbv1alpha1.Source) error {
			got = o
			return nil
		}).Once()
	return &got
}

func TestProvision(t *testing.T) {
	begun := activities.Begun{Generation: 3, MaxPolling: 10 * time.Minute}

	t.Run("succeeds once the status template says so", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).Return(begun, nil).Once()
		applied := []osbv1alpha1.Source{{APIVersion: "v1", Kind: "ConfigMap", Name: "db-1", Namespace: "tenants"}}
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).Return(applied, nil).Once()
		env.OnActivity(ops.RecordResources, mock.Anything, instance, lifecycle.OpProvision, applied).Return(nil).Once()
		polls := 0
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpProvision).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation) (activities.Outcome, error) {
				polls++
				if polls < 4 {
					return activities.Outcome{State: osbv1alpha1.StateInProgress}, nil
				}
				return activities.Outcome{State: osbv1alpha1.StateSucceeded, Description: "ready"}, nil
			})
		var gen int64
		env.OnActivity(ops.Finish, mock.Anything, instance, lifecycle.OpProvision, mock.Anything, mock.Anything, applied).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation, g int64, o activities.Outcome, _ []osbv1alpha1.Source) error {
				gen = g
				assert.Equal(t, osbv1alpha1.StateSucceeded, o.State)
				return nil
			}).Once()
		start := env.Now()
		env.ExecuteWorkflow(workflows.Provision, instance)
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		var res workflows.Result
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Equal(t, workflows.Result{State: osbv1alpha1.StateSucceeded, Description: "ready", Generation: 3, Resources: applied}, res)
		assert.Equal(t, 4, polls, "the first check runs right after apply")
		assert.EqualValues(t, 3, gen, "the generation begun is the one recorded")
		assert.Equal(t, 7*time.Second, env.Now().Sub(start), "waits of 1s, 2s and 4s between checks")
	})

	t.Run("a template error fails it with the message, without retries", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).Return(begun, nil).Once()
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).
			Return(nil, temporal.NewNonRetryableApplicationError(`provision template: template: provision:4: function "required" not defined`, activities.ErrTemplate, nil)).Once()
		got := finished(env, lifecycle.OpProvision)
		env.ExecuteWorkflow(workflows.Provision, instance)
		requireFailed(t, env, activities.ErrTemplate, got)
		assert.Equal(t, osbv1alpha1.StateFailed, got.State)
		assert.Equal(t, `provision failed: provision template: template: provision:4: function "required" not defined`, got.Description)
		assert.Nil(t, got.InstanceUsable, "a failed provision says nothing of usability")
	})

	t.Run("transient errors are retried", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).Return(begun, nil).Once()
		calls := 0
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation) ([]osbv1alpha1.Source, error) {
				calls++
				if calls < 3 {
					return nil, errors.New("etcdserver: request timed out")
				}
				return nil, nil
			})
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
		got := finished(env, lifecycle.OpProvision)
		env.ExecuteWorkflow(workflows.Provision, instance)
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, 3, calls)
		assert.Equal(t, osbv1alpha1.StateSucceeded, got.State)
	})

	t.Run("an error that lasts is retried visibly, then fails it at the deadline", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Begun{Generation: 1, MaxPolling: time.Minute}, nil).Once()
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).
			Return(nil, errors.New(`namespaces "later" not found`))
		var shown []string
		env.OnActivity(ops.RecordRetry, mock.Anything, instance, lifecycle.OpProvision, mock.Anything).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation, d string) error {
				shown = append(shown, d)
				return nil
			})
		got := finished(env, lifecycle.OpProvision)
		start := env.Now()
		env.ExecuteWorkflow(workflows.Provision, instance)
		requireFailed(t, env, workflows.KindRetriesExhausted, got)
		require.NotEmpty(t, shown)
		assert.Equal(t, `retrying apply (attempt 1 failed): namespaces "later" not found`, shown[0], "the status says so while it lasts")
		assert.Equal(t, `retrying apply (attempt 4 failed): namespaces "later" not found`, shown[3])
		assert.Len(t, shown, 7, "waits of 2, 4 and 8 s, then of 10 s until the minute is up")
		assert.Equal(t, time.Minute+1500*time.Millisecond, env.Now().Sub(start), "the minute, and the last attempt's own two quick retries")
		assert.Equal(t, `provision failed: apply kept failing until the plan's maximum_polling_duration ran out (8 attempts): namespaces "later" not found`, got.Description)
	})

	t.Run("times out after the plan's maximum polling duration", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Begun{Generation: 1, MaxPolling: 2 * time.Minute}, nil).Once()
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).Return(nil, nil).Once()
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Outcome{State: osbv1alpha1.StateInProgress, Description: "waiting for the namespace"}, nil)
		got := finished(env, lifecycle.OpProvision)
		start := env.Now()
		env.ExecuteWorkflow(workflows.Provision, instance)
		requireFailed(t, env, workflows.KindTimeout, got)
		assert.Equal(t, osbv1alpha1.StateFailed, got.State)
		assert.Equal(t, `provision did not finish within the plan's maximum_polling_duration of 2m0s (last status: in progress, "waiting for the namespace")`, got.Description)
		assert.Equal(t, 2*time.Minute, env.Now().Sub(start))
	})

	t.Run("a repeated start of a finished provision does nothing, and says which generation it found done", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).Return(activities.Begun{Done: true, Generation: 2}, nil).Once()
		env.ExecuteWorkflow(workflows.Provision, instance)
		require.NoError(t, env.GetWorkflowError())
		var res workflows.Result
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Equal(t, workflows.Result{FoundDone: 2}, res, "nothing applied by this start (Generation 0)")
	})

	t.Run("an update of an instance deleted since does nothing, and found nothing done", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpUpdate).Return(activities.Begun{Done: true}, nil).Once()
		env.ExecuteWorkflow(workflows.Update, instance)
		require.NoError(t, env.GetWorkflowError())
		var res workflows.Result
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Equal(t, workflows.Result{}, res)
	})

	t.Run("an instance deleted before it began ends quietly", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Begun{}, temporal.NewNonRetryableApplicationError("gone", activities.ErrGone, nil)).Once()
		env.ExecuteWorkflow(workflows.Provision, instance)
		require.NoError(t, env.GetWorkflowError())
	})

	t.Run("an unknown plan is written as failed", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).
			Return(activities.Begun{}, temporal.NewNonRetryableApplicationError(`unknown plan "p"`, activities.ErrPlan, nil)).Once()
		got := finished(env, lifecycle.OpProvision)
		env.ExecuteWorkflow(workflows.Provision, instance)
		requireFailed(t, env, activities.ErrPlan, got)
		assert.Equal(t, `provision failed: unknown plan "p"`, got.Description)
	})

	t.Run("an outcome that cannot be written fails the workflow", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpProvision).Return(begun, nil).Once()
		env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpProvision).Return(nil, nil).Once()
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpProvision).Return(activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
		env.OnActivity(ops.Finish, mock.Anything, instance, lifecycle.OpProvision, mock.Anything, mock.Anything, mock.Anything).
			Return(temporal.NewNonRetryableApplicationError("forbidden", activities.ErrApply, nil)).Once()
		env.ExecuteWorkflow(workflows.Provision, instance)
		err := env.GetWorkflowError()
		require.Error(t, err)
		assert.Contains(t, err.Error(), `writing the provision outcome "succeeded" of SFServiceInstance tenants/db-1`)
	})
}

func TestUpdateFailureKeepsTheInstanceUsable(t *testing.T) {
	env := opsEnv(t)
	env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpUpdate).Return(activities.Begun{Generation: 2, MaxPolling: time.Minute}, nil).Once()
	env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpUpdate).
		Return(nil, temporal.NewNonRetryableApplicationError(`applying ResourceQuota t/q: quota is invalid`, activities.ErrApply, nil)).Once()
	got := finished(env, lifecycle.OpUpdate)
	env.ExecuteWorkflow(workflows.Update, instance)
	requireFailed(t, env, activities.ErrApply, got)
	assert.Equal(t, osbv1alpha1.StateFailed, got.State)
	require.NotNil(t, got.InstanceUsable)
	assert.True(t, *got.InstanceUsable, "the previous version still runs")
	require.NotNil(t, got.UpdateRepeatable)
	assert.False(t, *got.UpdateRepeatable, "the API server refuses the same update again")
}

func TestUpdateTimeoutIsRepeatable(t *testing.T) {
	env := opsEnv(t)
	env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpUpdate).Return(activities.Begun{Generation: 2, MaxPolling: time.Minute}, nil).Once()
	env.OnActivity(ops.ApplyTemplates, mock.Anything, instance, lifecycle.OpUpdate).Return(nil, nil).Once()
	env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpUpdate).Return(activities.Outcome{State: osbv1alpha1.StateInProgress}, nil)
	got := finished(env, lifecycle.OpUpdate)
	env.ExecuteWorkflow(workflows.Update, instance)
	requireFailed(t, env, workflows.KindTimeout, got)
	assert.Equal(t, osbv1alpha1.StateFailed, got.State)
	require.NotNil(t, got.UpdateRepeatable)
	assert.True(t, *got.UpdateRepeatable)
}

func TestDeprovision(t *testing.T) {
	t.Run("removes, waits, then finishes", func(t *testing.T) {
		env := opsEnv(t)
		var order []string
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Begun{Generation: 1, MaxPolling: time.Hour}, nil).Once()
		env.OnActivity(ops.RemoveBindings, mock.Anything, instance).
			Return(func(context.Context, lifecycle.Target) (int, error) {
				order = append(order, "bindings")
				return 0, nil
			}).Once()
		env.OnActivity(ops.RemoveResources, mock.Anything, instance, lifecycle.OpDeprovision).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation) error {
				order = append(order, "remove")
				return nil
			}).Once()
		polls := 0
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpDeprovision).
			Return(func(_ context.Context, _ lifecycle.Target, _ lifecycle.Operation) (activities.Outcome, error) {
				polls++
				order = append(order, "observe")
				if polls == 1 {
					return activities.Outcome{State: osbv1alpha1.StateInProgress}, nil
				}
				return activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil
			})
		got := finished(env, lifecycle.OpDeprovision)
		env.ExecuteWorkflow(workflows.Deprovision, instance)
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, []string{"bindings", "remove", "observe", "observe"}, order, "deprovision has no template to apply")
		assert.Equal(t, osbv1alpha1.StateSucceeded, got.State)
	})

	t.Run("a failed removal keeps the finalizer and says why", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Begun{Generation: 1, MaxPolling: time.Hour}, nil).Once()
		env.OnActivity(ops.RemoveBindings, mock.Anything, instance).Return(0, nil).Once()
		env.OnActivity(ops.RemoveResources, mock.Anything, instance, lifecycle.OpDeprovision).
			Return(temporal.NewNonRetryableApplicationError("deleting Namespace t: forbidden", activities.ErrApply, nil)).Once()
		got := finished(env, lifecycle.OpDeprovision)
		env.ExecuteWorkflow(workflows.Deprovision, instance)
		requireFailed(t, env, activities.ErrApply, got)
		assert.Equal(t, osbv1alpha1.StateFailed, got.State)
		assert.Equal(t, "deprovision failed: deleting Namespace t: forbidden", got.Description)
		require.NotNil(t, got.InstanceUsable)
	})

	t.Run("a replayed step that finds the instance gone ends it: its release was the lost task's", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Begun{Generation: 1, MaxPolling: time.Hour}, nil).Once()
		env.OnActivity(ops.RemoveBindings, mock.Anything, instance).Return(0, nil).Once()
		env.OnActivity(ops.RemoveResources, mock.Anything, instance, lifecycle.OpDeprovision).Return(nil).Once()
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpDeprovision).
			Return(activities.Outcome{}, temporal.NewNonRetryableApplicationError("sfserviceinstance tenant/db-1 is gone", activities.ErrGone, nil)).Once()
		env.ExecuteWorkflow(workflows.Deprovision, instance)
		require.NoError(t, env.GetWorkflowError(), "a removal whose resource went is done, not failed")
		var res workflows.Result
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Zero(t, res.Generation, "it applied nothing itself")
		env.AssertNotCalled(t, "Finish", mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything)
	})

	t.Run("unbinds the instance's bindings first, waiting on timers", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Begun{Generation: 1, MaxPolling: time.Hour}, nil).Once()
		left := []int{2, 1, 0}
		env.OnActivity(ops.RemoveBindings, mock.Anything, instance).
			Return(func(context.Context, lifecycle.Target) (int, error) {
				n := left[0]
				left = left[1:]
				return n, nil
			}).Times(3)
		env.OnActivity(ops.RemoveResources, mock.Anything, instance, lifecycle.OpDeprovision).Return(nil).Once()
		env.OnActivity(ops.Observe, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
		got := finished(env, lifecycle.OpDeprovision)
		start := env.Now()
		env.ExecuteWorkflow(workflows.Deprovision, instance)
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, osbv1alpha1.StateSucceeded, got.State)
		assert.Equal(t, 3*time.Second, env.Now().Sub(start), "waits of 1 s, then 2 s, between the looks")
	})

	t.Run("bindings that do not go fail it at the deadline", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, instance, lifecycle.OpDeprovision).Return(activities.Begun{Generation: 1, MaxPolling: time.Minute}, nil).Once()
		env.OnActivity(ops.RemoveBindings, mock.Anything, instance).Return(2, nil)
		got := finished(env, lifecycle.OpDeprovision)
		env.ExecuteWorkflow(workflows.Deprovision, instance)
		requireFailed(t, env, workflows.KindTimeout, got)
		assert.Equal(t, osbv1alpha1.StateFailed, got.State)
		assert.Equal(t, "deprovision failed: 2 of the instance's bindings or other users were still there after the plan's maximum_polling_duration of 1m0s", got.Description)
		require.NotNil(t, got.InstanceUsable)
		assert.True(t, *got.InstanceUsable)
	})
}

func TestBindAndUnbind(t *testing.T) {
	binding := lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: "tenants", Name: "app-1"}
	for _, tc := range []struct {
		op lifecycle.Operation
		wf any
	}{{lifecycle.OpBind, workflows.Bind}, {lifecycle.OpUnbind, workflows.Unbind}} {
		t.Run(string(tc.op), func(t *testing.T) {
			env := opsEnv(t)
			env.OnActivity(ops.Begin, mock.Anything, binding, tc.op).Return(activities.Begun{Generation: 1, MaxPolling: time.Minute}, nil).Once()
			env.OnActivity(ops.ApplyTemplates, mock.Anything, binding, tc.op).Return(nil, nil).Once()
			if tc.op == lifecycle.OpUnbind {
				env.OnActivity(ops.RemoveResources, mock.Anything, binding, tc.op).Return(nil).Once()
			}
			env.OnActivity(ops.Observe, mock.Anything, binding, tc.op).Return(activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
			env.OnActivity(ops.Finish, mock.Anything, binding, tc.op, int64(1), activities.Outcome{State: osbv1alpha1.StateSucceeded}, []osbv1alpha1.Source(nil)).Return(nil).Once()
			env.ExecuteWorkflow(tc.wf, binding)
			require.NoError(t, env.GetWorkflowError())
		})
	}

	t.Run("an unbind with no template applies nothing", func(t *testing.T) {
		env := opsEnv(t)
		env.OnActivity(ops.Begin, mock.Anything, binding, lifecycle.OpUnbind).
			Return(activities.Begun{Generation: 1, MaxPolling: time.Minute, NoUnbindTemplate: true}, nil).Once()
		env.OnActivity(ops.RemoveResources, mock.Anything, binding, lifecycle.OpUnbind).Return(nil).Once()
		env.OnActivity(ops.Observe, mock.Anything, binding, lifecycle.OpUnbind).Return(activities.Outcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
		env.OnActivity(ops.Finish, mock.Anything, binding, lifecycle.OpUnbind, int64(1), mock.Anything, mock.Anything).Return(nil).Once()
		env.ExecuteWorkflow(workflows.Unbind, binding)
		require.NoError(t, env.GetWorkflowError())
	})
}

// TestRegisteredUnderTheirTypes: the watcher starts the lifecycle
// workflows by runs.WorkflowType; each name reaches its workflow.
func TestRegisteredUnderTheirTypes(t *testing.T) {
	for _, op := range []lifecycle.Operation{lifecycle.OpProvision, lifecycle.OpUpdate, lifecycle.OpDeprovision, lifecycle.OpBind, lifecycle.OpUnbind} {
		t.Run(string(op), func(t *testing.T) {
			env := opsEnv(t)
			workflows.Register(env)
			target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "tenants", Name: "db-1"}
			env.OnActivity(ops.Begin, mock.Anything, target, op).Return(activities.Begun{Done: true}, nil).Once()
			env.ExecuteWorkflow(runs.WorkflowType(op), target)
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
		})
	}
}

// requireFailed checks that the run failed as the operation did: its
// failure's message is the description written to the status and its type
// the failure's kind (any, when kind is empty).
func requireFailed(t *testing.T, env *testsuite.TestWorkflowEnvironment, kind string, got *activities.Outcome) {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &appErr, "a failed operation fails the run")
	if kind != "" {
		assert.Equal(t, kind, appErr.Type())
	}
	assert.Equal(t, got.Description, appErr.Message())
	assert.True(t, appErr.NonRetryable())
}
