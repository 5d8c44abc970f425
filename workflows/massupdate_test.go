package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var masses *activities.MassUpdates

// fakeUpdates stands in for the batches of Update runs: each batch takes a
// second; fail names the instances whose update fails, busy those another
// run holds the first time they are tried.
type fakeUpdates struct {
	mu                      sync.Mutex
	inFlight, most, started int
	fail, busy              map[string]bool
	// startedAt is each update's start, in workflow time; batches, each
	// batch's size.
	startedAt []time.Time
	batches   []int
}

func (f *fakeUpdates) begin(env *testsuite.TestWorkflowEnvironment, b massupdate.Batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, len(b.Targets))
	for range b.Targets {
		f.inFlight++
		f.started++
		f.startedAt = append(f.startedAt, env.Now())
	}
	f.most = max(f.most, f.inFlight)
}

func (f *fakeUpdates) end(_ context.Context, b massupdate.Batch) ([]massupdate.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]massupdate.Outcome, len(b.Targets))
	for i, t := range b.Targets {
		f.inFlight--
		switch {
		case f.busy[t.Name]:
			f.busy[t.Name] = false
			out[i].Busy = true
		case f.fail[t.Name]:
			out[i].Failure = "the template does not render"
		default:
			out[i].State = "succeeded"
		}
	}
	return out, nil
}

func massEnv(t *testing.T, n int, f *fakeUpdates) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.MassUpdates{})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var b massupdate.Batch
		if info.ActivityType.Name == "UpdateInstances" && assert.NoError(t, args.Get(&b)) {
			f.begin(env, b)
		}
	})
	env.OnActivity(masses.UpdateInstances, mock.Anything, mock.Anything).After(time.Second).Return(f.end)
	sel := massupdate.Selection{Skipped: 2}
	for i := range n {
		sel.Targets = append(sel.Targets, massupdate.Target{Namespace: "apps", Name: fmt.Sprintf("i-%02d", i), PlanID: "p"})
	}
	env.OnActivity(masses.SelectInstances, mock.Anything, mock.Anything).Return(sel, nil).Once()
	return env
}

func request(concurrency int) massupdate.Request {
	return massupdate.Request{Name: "test", Selector: massupdate.Selector{PlanIDs: []string{"p"}}, Concurrency: concurrency}
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) massupdate.Progress {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var p massupdate.Progress
	require.NoError(t, env.GetWorkflowResult(&p))
	return p
}

// TestMassUpdateKeepsItsConcurrency: never more than Concurrency updates
// at once, all of them done, the current ones skipped.
func TestMassUpdateKeepsItsConcurrency(t *testing.T) {
	f := &fakeUpdates{}
	env := massEnv(t, 7, f)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(runs.QueryProgress)
		require.NoError(t, err)
		var p massupdate.Progress
		require.NoError(t, v.Get(&p))
		assert.Equal(t, massupdate.Progress{State: massupdate.Running, Total: 9, Succeeded: 3, Skipped: 2, InFlight: 3, Remaining: 1,
			Concurrency: 3, Started: p.Started, Rate: p.Rate, ETA: p.ETA}, p)
	}, 1500*time.Millisecond)
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: request(3)})
	p := result(t, env)
	assert.Equal(t, 3, f.most)
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, 7, p.Succeeded)
	assert.Equal(t, 2, p.Skipped)
	assert.Equal(t, 9, p.Total)
}

// TestMassUpdateSteered: a pause starts nothing new, a resume goes on, a
// new concurrency holds from then on, a cancel leaves the rest.
func TestMassUpdateSteered(t *testing.T) {
	f := &fakeUpdates{}
	env := massEnv(t, 20, f)
	steer := func(at time.Duration, s massupdate.Steer) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(runs.SignalSteer, s) }, at)
	}
	steer(1500*time.Millisecond, massupdate.Steer{Action: massupdate.Pause, By: "admin ann"})
	env.RegisterDelayedCallback(func() { assert.Equal(t, 4, f.started, "paused: two in flight finish, nothing starts") }, time.Hour)
	steer(time.Hour+time.Second, massupdate.Steer{Action: massupdate.SetConcurrency, Concurrency: 4, By: "admin bob"})
	steer(time.Hour+1500*time.Millisecond, massupdate.Steer{Action: "explode", By: "admin eve"})
	steer(time.Hour+2*time.Second, massupdate.Steer{Action: massupdate.Resume, By: "admin ann"})
	steer(time.Hour+3500*time.Millisecond, massupdate.Steer{Action: massupdate.Cancel})
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: request(2)})
	p := result(t, env)
	assert.Equal(t, massupdate.Cancelled, p.State)
	assert.Equal(t, "cancelled by the operator", p.Reason)
	assert.Equal(t, 4, f.most)
	assert.Equal(t, 12, p.Succeeded, "4 before the pause, 8 after the resume; the rest untouched")
	assert.Equal(t, 12, f.started)
	var steered []string
	for _, s := range p.Steered {
		steered = append(steered, s.Action+" by "+s.By)
	}
	assert.Equal(t, []string{"pause by admin ann", "concurrency by admin bob", "resume by admin ann", "cancel by "}, steered,
		"what the run obeyed, and who sent it; an unknown action is not recorded")
}

// TestMassUpdateCanary: with a canary of 3, a run updates three instances,
// lets them end, and pauses saying so; resumed, it updates the rest.
func TestMassUpdateCanary(t *testing.T) {
	f := &fakeUpdates{}
	env := massEnv(t, 12, f)
	req := request(5)
	req.Canary = 3
	env.RegisterDelayedCallback(func() {
		assert.Equal(t, 3, f.started, "the canary alone, though 5 may run at once")
		var p massupdate.Progress
		q, err := env.QueryWorkflow(runs.QueryProgress)
		if assert.NoError(t, err) && assert.NoError(t, q.Get(&p)) {
			assert.Equal(t, massupdate.Paused, p.State)
			assert.Equal(t, "canary: 3 updated; resume to update the other 9", p.Reason)
		}
		env.SignalWorkflow(runs.SignalSteer, massupdate.Steer{Action: massupdate.Resume})
	}, time.Hour)
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: req})
	p := result(t, env)
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, 12, p.Succeeded)
	assert.Equal(t, 5, f.most, "after the canary, the run's concurrency")
}

// TestMassUpdateRate: at 2 updates a second, starts are half a second apart
// or more, however many may run at once.
func TestMassUpdateRate(t *testing.T) {
	f := &fakeUpdates{}
	env := massEnv(t, 10, f)
	req := request(10)
	req.Rate = 2
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: req})
	p := result(t, env)
	assert.Equal(t, 10, p.Succeeded)
	require.Len(t, f.startedAt, 10)
	for i := 1; i < len(f.startedAt); i++ {
		assert.GreaterOrEqual(t, f.startedAt[i].Sub(f.startedAt[i-1]), 500*time.Millisecond, "start %d", i)
	}
	assert.Less(t, f.most, 10, "the rate, not the concurrency, bounds what runs at once")
}

// TestMassUpdateFailureBudget: the run pauses once the budget is spent,
// listing the failures.
func TestMassUpdateFailureBudget(t *testing.T) {
	f := &fakeUpdates{fail: map[string]bool{"i-01": true, "i-02": true, "i-05": true}}
	env := massEnv(t, 10, f)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(runs.QueryProgress)
		require.NoError(t, err)
		var p massupdate.Progress
		require.NoError(t, v.Get(&p))
		assert.Equal(t, massupdate.Paused, p.State)
		assert.Equal(t, "2 updates failed (maxFailures 10%); resume to go on, or cancel", p.Reason)
		assert.Equal(t, []massupdate.Failure{{Instance: "apps/i-01", Description: "the template does not render"},
			{Instance: "apps/i-02", Description: "the template does not render"}}, p.Failures)
		env.SignalWorkflow(runs.SignalSteer, massupdate.Steer{Action: massupdate.Resume})
	}, time.Hour)
	req := request(1)
	req.MaxFailures = massupdate.Budget{Percent: 10} // 2 of 12 (10, and 2 skipped)
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: req})
	p := result(t, env)
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, 3, p.Failed)
	assert.Equal(t, 7, p.Succeeded)
}

// TestMassUpdateContinuesAsNew: once Temporal suggests it (as it does past
// a history limit, and as the run's own bound of starts does), a run lets
// its updates in flight end and continues as new with what is left.
func TestMassUpdateContinuesAsNew(t *testing.T) {
	f := &fakeUpdates{}
	env := massEnv(t, 30, f)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 3500*time.Millisecond)
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: request(3)})
	require.True(t, env.IsWorkflowCompleted())
	var cont *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &cont)
	assert.Equal(t, runs.MassUpdateType, cont.WorkflowType.Name)
	assert.Zero(t, f.inFlight, "none in flight when it continues")
	assert.Greater(t, f.started, 3, "it ran a while before the suggestion")
	assert.Less(t, f.started, 30, "it continued before it was done")
	var next workflows.MassUpdateInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(cont.Input, &next))
	require.NotNil(t, next.Carry)
	assert.Equal(t, f.started, next.Carry.Progress.Succeeded)
	assert.Len(t, next.Carry.Pending, 30-f.started, "the rest go on in the next run")
	assert.Equal(t, "test", next.Name)
}

// TestMassUpdateInBatches: the updates a run may start at once go in
// batches of half its concurrency, an instance another run holds is tried
// again later, and a batch that cannot start its updates fails each of
// them, saying why.
func TestMassUpdateInBatches(t *testing.T) {
	f := &fakeUpdates{busy: map[string]bool{"i-03": true}}
	env := massEnv(t, 12, f)
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: request(10)})
	p := result(t, env)
	assert.Equal(t, 12, p.Succeeded)
	assert.Equal(t, []int{5, 5, 2, 1}, f.batches, "two batches of five; the two left; the busy one again, once its wait is over")
	assert.Equal(t, 3*time.Second, f.startedAt[12].Sub(f.startedAt[3]), "the busy one is tried again when its batch has ended (1 s) and its wait is over (2 s)")

	var s testsuite.WorkflowTestSuite
	env = s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.MassUpdates{})
	env.OnActivity(masses.SelectInstances, mock.Anything, mock.Anything).Return(massupdate.Selection{Targets: massupdate.Targets{
		{Namespace: "apps", Name: "a", PlanID: "p"}, {Namespace: "apps", Name: "b", PlanID: "p"}}}, nil).Once()
	env.OnActivity(masses.UpdateInstances, mock.Anything, mock.Anything).Return(nil, errors.New("starting the update of apps/a: Temporal is unavailable"))
	env.ExecuteWorkflow(workflows.MassUpdate, workflows.MassUpdateInput{Request: request(10)})
	p = result(t, env)
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, 2, p.Failed)
	assert.Equal(t, []massupdate.Failure{
		{Instance: "apps/a", Description: "starting the update of apps/a: Temporal is unavailable"},
		{Instance: "apps/b", Description: "starting the update of apps/a: Temporal is unavailable"},
	}, p.Failures)
}
