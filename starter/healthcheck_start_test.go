package starter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestLoopsStartOnceTemporalAnswers: a watcher whose first starts time
// out (Temporal loaded or still starting, as on a two-core CI machine)
// keeps trying until every shard's loop is started, instead of stopping
// the whole watcher with the error.
func TestLoopsStartOnceTemporalAnswers(t *testing.T) {
	tc := &mocks.Client{}
	started := map[string]int{}
	calls := 0
	tc.On("ExecuteWorkflow", mock.Anything, mock.Anything, runs.HealthChecksType, mock.Anything).Return(
		func(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
			// The fourth start times out: shards 0 to 2 are started, the
			// rest wait for the next pass.
			if calls++; calls == 4 {
				return nil, context.DeadlineExceeded
			}
			started[o.ID]++
			return &mocks.WorkflowRun{}, nil
		})
	h := &HealthChecks{Temporal: tc}

	require.NoError(t, h.ensureLoops(t.Context()), "the loops start once Temporal answers")

	assert.Len(t, started, healthcheck.Shards, "every shard's loop is started")
	for shard := range healthcheck.Shards {
		assert.Positive(t, started[runs.HealthChecksID(shard)], "shard %d's loop is started", shard)
	}
	assert.Equal(t, 1, started[runs.HealthChecksID(healthcheck.Shards-1)], "the last shard is started only by the pass that got through")
}

// TestLoopsStopTryingWithTheWatcher: a watcher that stops while Temporal
// never answers returns at once, without an error of its own.
func TestLoopsStopTryingWithTheWatcher(t *testing.T) {
	tc := &mocks.Client{}
	ctx, cancel := context.WithCancel(t.Context())
	tc.On("ExecuteWorkflow", mock.Anything, mock.Anything, runs.HealthChecksType, mock.Anything).Return(
		func(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
			cancel()
			return nil, context.Canceled
		})

	require.NoError(t, (&HealthChecks{Temporal: tc}).ensureLoops(ctx))
	tc.AssertNumberOfCalls(t, "ExecuteWorkflow", 1)
}
