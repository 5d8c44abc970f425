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
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/rotation"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var rotations *activities.Rotations

var appBinding = lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: "apps", Name: "app"}

func rotationEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Rotations{})
	return env
}

// TestRotationWaitsRotatesAndRetires: a binding at generation 1 waits out
// its period on a timer, binds generation 2, waits for its bind, publishes
// it, retires generation 1 once its overlap is over, and ends once the
// binding is gone.
func TestRotationWaitsRotatesAndRetires(t *testing.T) {
	env := rotationEnv()
	start := env.Now()
	var looks atomic.Int32
	env.OnActivity(rotations.RotationState, mock.Anything, appBinding).Return(func(context.Context, lifecycle.Target) (activities.RotationState, error) {
		switch looks.Add(1) {
		case 1: // generation 1, due in 20 s
			return activities.RotationState{Rotates: true, Generation: 1, MaxPolling: time.Minute, Plan: rotation.Plan{Wake: start.Add(20 * time.Second)}}, nil
		case 2:
			return activities.RotationState{Rotates: true, Generation: 1, MaxPolling: time.Minute, Plan: rotation.Plan{Rotate: true, Why: "scheduled"}}, nil
		case 3: // generation 2 published; generation 1 retires in 10 s
			return activities.RotationState{Rotates: true, Generation: 2, Plan: rotation.Plan{Wake: env.Now().Add(10 * time.Second)}}, nil
		case 4:
			return activities.RotationState{Rotates: true, Generation: 2, Plan: rotation.Plan{Retire: []string{"app-r1"}}}, nil
		}
		return activities.RotationState{Gone: true}, nil
	})
	var states atomic.Int32
	env.OnActivity(rotations.BindSuccessor, mock.Anything, appBinding, int64(2)).Return(nil).Once()
	env.OnActivity(rotations.SuccessorState, mock.Anything, appBinding, int64(2)).Return(func(context.Context, lifecycle.Target, int64) (activities.SuccessorOutcome, error) {
		if states.Add(1) == 1 {
			return activities.SuccessorOutcome{State: osbv1alpha1.StateInProgress}, nil
		}
		return activities.SuccessorOutcome{State: osbv1alpha1.StateSucceeded}, nil
	})
	env.OnActivity(rotations.PublishSuccessor, mock.Anything, appBinding, int64(2), "scheduled").Return(nil).Once()
	env.OnActivity(rotations.RetireSuccessor, mock.Anything, appBinding, "app-r1").Return(nil).Once()
	// The watcher's signal for the binding's deletion wakes the last wait.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalRotationChanged, "deleted") }, 2*time.Minute)

	env.ExecuteWorkflow(workflows.CredentialRotation, appBinding)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	assert.EqualValues(t, 2, states.Load(), "the successor's bind is polled until it succeeds")
	assert.GreaterOrEqual(t, env.Now().Sub(start), 30*time.Second, "the period and the overlap are waited out")
}

// TestRotationThatFailsIsRecordedAndTriedAgain: a successor whose bind
// fails is recorded (the credentials stay), and tried again a minute
// later; a signal does not have to come.
func TestRotationThatFailsIsRecordedAndTriedAgain(t *testing.T) {
	env := rotationEnv()
	start := env.Now()
	var looks atomic.Int32
	env.OnActivity(rotations.RotationState, mock.Anything, appBinding).Return(func(context.Context, lifecycle.Target) (activities.RotationState, error) {
		if looks.Add(1) <= 2 {
			return activities.RotationState{Rotates: true, Generation: 3, MaxPolling: time.Minute, Plan: rotation.Plan{Rotate: true, Why: "forced"}}, nil
		}
		return activities.RotationState{Gone: true}, nil
	})
	env.OnActivity(rotations.BindSuccessor, mock.Anything, appBinding, int64(4)).Return(nil).Twice()
	env.OnActivity(rotations.SuccessorState, mock.Anything, appBinding, int64(4)).
		Return(activities.SuccessorOutcome{State: osbv1alpha1.StateFailed, Description: "the login was refused"}, nil).Twice()
	env.OnActivity(rotations.RotationFailed, mock.Anything, appBinding, int64(4), "the successor's bind failed: the login was refused").Return(nil).Twice()

	env.ExecuteWorkflow(workflows.CredentialRotation, appBinding)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
	assert.GreaterOrEqual(t, env.Now().Sub(start), time.Minute, "the second try waits a minute")
}

// TestRotatingBindingPublishesItsFirstSuccessor: the Bind of a rotating
// binding applies nothing of its own; it binds the first successor and
// publishes it.
func TestRotatingBindingPublishesItsFirstSuccessor(t *testing.T) {
	env := rotationEnv()
	env.RegisterActivity(&activities.Operations{})
	env.OnActivity(ops.Begin, mock.Anything, appBinding, lifecycle.OpBind).
		Return(activities.Begun{Generation: 1, MaxPolling: time.Minute, Rotates: true}, nil)
	env.OnActivity(rotations.BindSuccessor, mock.Anything, appBinding, int64(1)).Return(nil).Once()
	env.OnActivity(rotations.SuccessorState, mock.Anything, appBinding, int64(1)).Return(activities.SuccessorOutcome{State: osbv1alpha1.StateSucceeded}, nil).Once()
	env.OnActivity(rotations.PublishSuccessor, mock.Anything, appBinding, int64(1), "first credentials").Return(nil).Once()
	env.OnActivity(ops.Finish, mock.Anything, appBinding, lifecycle.OpBind, int64(1), mock.MatchedBy(func(o activities.Outcome) bool {
		return o.State == osbv1alpha1.StateSucceeded && o.Description == "credentials of generation 1 published (first credentials)"
	}), mock.Anything).Return(nil).Once()

	env.ExecuteWorkflow(workflows.Bind, appBinding)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}
