package workflows_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
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
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var checks *activities.HealthChecks

// passes records the passes a loop asks for. Local activities run on
// goroutines of their own, hence the lock.
type passes struct {
	mu  sync.Mutex
	got []activities.Pass
	// fail fails the pass of this index (every attempt).
	fail int
}

// recorded is what the loop asked for so far.
func (p *passes) recorded() []activities.Pass {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// failNext fails the next pass.
func (p *passes) failNext() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = len(p.got)
}

func (p *passes) env(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.HealthChecks{})
	env.OnActivity(checks.CheckServices, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.Pass) (activities.Passed, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.got) == 0 || !reflect.DeepEqual(p.got[len(p.got)-1], in) {
				p.got = append(p.got, in) // attempts of one pass count once
			}
			if len(p.got)-1 == p.fail {
				return activities.Passed{}, errors.New("the API server is away")
			}
			return activities.Passed{Services: 3, Checked: 1, Tick: 2 * time.Second}, nil
		})
	return env
}

// TestHealthChecksLoop: the loop checks a signalled service at once, then
// passes over contiguous windows at the tick the pass asked for (a shorter
// one cuts the current wait short); a pass that failed is not counted, so
// the next window covers it too.
func TestHealthChecksLoop(t *testing.T) {
	p := &passes{fail: -1}
	env := p.env(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runs.SignalServiceChanged, "ns/a")
		env.SignalWorkflow(runs.SignalServiceChanged, "ns/b")
	}, time.Second)
	env.RegisterDelayedCallback(p.failNext, 10*time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 20*time.Second)
	start := env.Now()
	env.ExecuteWorkflow(workflows.HealthChecks, runs.HealthChecksInput{Shard: 7})
	require.True(t, env.IsWorkflowCompleted())
	var canceled *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &canceled, "a cancelled loop ends")

	var signalled []string
	var windows []activities.Pass
	got := p.recorded()
	p.mu.Lock()
	failedAt := p.fail
	p.mu.Unlock()
	for _, in := range got {
		if in.From.IsZero() {
			assert.Empty(t, windows, "signals come before the first tick")
			signalled = append(signalled, in.Services...)
		} else {
			windows = append(windows, in)
		}
	}
	assert.Equal(t, []string{"ns/a", "ns/b"}, signalled, "signalled services are checked at once")
	require.GreaterOrEqual(t, len(windows), 6)
	assert.WithinDuration(t, start.Add(3*time.Second), windows[0].To, 0,
		"the first tick (5 s) is cut short by the signalled pass's tick: 2 s from the signal at 1 s")
	assert.WithinDuration(t, start.Add(time.Second), windows[0].From, 0, "the first window is one tick long")

	failed := failedAt - len(got) + len(windows)
	require.True(t, failed > 0 && failed < len(windows)-1, "the failed pass is a window's: %d", failed)
	for i := 1; i < len(windows); i++ {
		if i-1 == failed {
			assert.Equal(t, windows[i-1].From, windows[i].From, "a failed pass's window is covered by the next")
			assert.Equal(t, 3*time.Second+2*time.Second, windows[i].To.Sub(windows[i-1].To), "three attempts, then the tick")
		} else {
			assert.Equal(t, 2*time.Second, windows[i].To.Sub(windows[i-1].To), "later ticks are the pass's")
			assert.Equal(t, windows[i-1].To, windows[i].From, "windows are contiguous")
		}
	}
}

// TestHealthChecksContinueAsNew: after its passes, a loop continues as
// new with where its window ended and its tick.
func TestHealthChecksContinueAsNew(t *testing.T) {
	p := &passes{fail: -1}
	env := p.env(t)
	env.ExecuteWorkflow(workflows.HealthChecks, runs.HealthChecksInput{Shard: 1})
	require.True(t, env.IsWorkflowCompleted())
	var next *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &next)
	assert.Equal(t, runs.HealthChecksType, next.WorkflowType.Name)
	var in runs.HealthChecksInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(next.Input, &in))
	got := p.recorded()
	require.NotEmpty(t, got)
	assert.Equal(t, runs.HealthChecksInput{Shard: 1, Last: got[len(got)-1].To, Tick: 2 * time.Second}, in)
	assert.Len(t, got, 500, "a run holds 500 passes")
}

// TestHealthChecksContinueAsNewWhenSuggested: a loop whose history Temporal
// finds long continues as new at its next pass, before its own bound.
func TestHealthChecksContinueAsNewWhenSuggested(t *testing.T) {
	p := &passes{fail: -1}
	env := p.env(t)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 20*time.Second)
	env.ExecuteWorkflow(workflows.HealthChecks, runs.HealthChecksInput{Shard: 1})
	require.True(t, env.IsWorkflowCompleted())
	var next *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &next)
	got := p.recorded()
	assert.Less(t, len(got), 20, "it continued long before 500 passes")
	assert.NotEmpty(t, got)
}
