package workflows_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows"
)

func TestSelfCheck(t *testing.T) {
	want := []string{"sfplans.osb.servicefabrik.io", "usagekinds.servicecatalog.kyma-project.io"}

	t.Run("every CRD established", func(t *testing.T) {
		env := newEnv(t)
		env.OnActivity((&activities.Kubernetes{}).EstablishedCRDs, mock.Anything).
			Return([]string{"other.example.com", "sfplans.osb.servicefabrik.io", "usagekinds.servicecatalog.kyma-project.io"}, nil)
		env.ExecuteWorkflow(workflows.SelfCheck, want)
		require.NoError(t, env.GetWorkflowError())
		var res workflows.SelfCheckResult
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Empty(t, res.Missing, "a CRD that is not wanted is not missing either")
	})

	t.Run("a CRD missing", func(t *testing.T) {
		env := newEnv(t)
		env.OnActivity((&activities.Kubernetes{}).EstablishedCRDs, mock.Anything).
			Return([]string{"sfplans.osb.servicefabrik.io"}, nil)
		env.ExecuteWorkflow(workflows.SelfCheck, want)
		var res workflows.SelfCheckResult
		require.NoError(t, env.GetWorkflowResult(&res))
		assert.Equal(t, []string{"usagekinds.servicecatalog.kyma-project.io"}, res.Missing)
	})

	t.Run("API server unreachable: retried, then the workflow fails", func(t *testing.T) {
		env := newEnv(t)
		calls := 0
		env.OnActivity((&activities.Kubernetes{}).EstablishedCRDs, mock.Anything).
			Return(func(context.Context) ([]string, error) {
				calls++
				return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
			})
		env.ExecuteWorkflow(workflows.SelfCheck, want)
		err := env.GetWorkflowError()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "reading CRDs from the API server")
		assert.Contains(t, err.Error(), "connection refused")
		assert.Equal(t, 5, calls, "the retry policy allows five attempts")
		var appErr *temporal.ApplicationError
		assert.ErrorAs(t, err, &appErr)
	})
}

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Kubernetes{})
	t.Cleanup(func() { env.AssertExpectations(t) })
	return env
}
