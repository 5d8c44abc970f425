package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/workflows/runs"
)

// HealthChecksInput starts, or continues, the loop of one shard.
type HealthChecksInput struct {
	Shard int `json:"shard"`
	// Last is where the previous pass's window ended; the next window
	// starts there, so a late pass runs the checks it missed.
	Last time.Time `json:"last,omitzero"`
	// Tick is the wait between passes (the activity says how long).
	Tick time.Duration `json:"tick,omitempty"`
	// Pending are services signalled but not checked before the loop
	// continued as new.
	Pending []string `json:"pending,omitempty"`
	// PassesPerRun is how many passes a run makes before it continues as
	// new (0: passesPerRun).
	PassesPerRun int `json:"passesPerRun,omitempty"`
}

// passesPerRun bounds a run's history: a loop continues as new after
// this many passes (a few thousand events), or sooner if Temporal asks.
const passesPerRun = 500

// firstTick is the wait before the first pass's answer says how long.
const firstTick = 5 * time.Second

// HealthChecks is the health-check loop of one shard of the registered
// services, for as long as Quartermaster runs:
//
//  1. wait for the next tick, checking at once each service the watcher
//     signals (created, changed or deleted);
//  2. on the tick, pass over the shard: check the services whose instant
//     has come, read the ended container checks, write what changed;
//  3. continue as new now and then, so that the history stays small.
//
// The schedule lives in the services' specs and the results in their
// status; the loop carries only where its last window ended.
func HealthChecks(ctx workflow.Context, in HealthChecksInput) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 3},
	})
	changed := workflow.GetSignalChannel(ctx, runs.SignalServiceChanged)
	tick := in.Tick
	if tick <= 0 {
		tick = firstTick
	}
	pending, last := in.Pending, in.Last
	limit := in.PassesPerRun
	if limit <= 0 {
		limit = passesPerRun
	}
	for passes := 0; passes < limit && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		if err := waitTick(ctx, in.Shard, changed, &pending, &tick); err != nil {
			return err
		}
		now := workflow.Now(ctx)
		from := last
		if from.IsZero() {
			from = now.Add(-tick)
		}
		if done, ok := pass(ctx, activities.Pass{Shard: in.Shard, From: from, To: now}); ok {
			last, tick = now, done.Tick
		}
	}
	pending = drain(changed, pending)
	return workflow.NewContinueAsNewError(ctx, HealthChecks, HealthChecksInput{Shard: in.Shard, Last: last, Tick: tick, Pending: pending, PassesPerRun: in.PassesPerRun})
}

// waitTick waits out the tick, checking at once each service signalled
// meanwhile. When such a pass asks for a shorter tick (an empty shard that
// got its first service waits a minute, a busy one seconds), the wait is
// cut short to it.
func waitTick(ctx workflow.Context, shard int, changed workflow.ReceiveChannel, pending *[]string, tick *time.Duration) error {
	deadline := workflow.Now(ctx).Add(*tick)
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer func() { cancel() }()
	timer := workflow.NewTimer(timerCtx, *tick)
	for fired := false; !fired; {
		if len(*pending) > 0 {
			done, ok := pass(ctx, activities.Pass{Shard: shard, Services: *pending})
			*pending = nil
			if ok && done.Tick > 0 && workflow.Now(ctx).Add(done.Tick).Before(deadline) {
				cancel()
				*tick, deadline = done.Tick, workflow.Now(ctx).Add(done.Tick)
				timerCtx, cancel = workflow.WithCancel(ctx)
				timer = workflow.NewTimer(timerCtx, done.Tick)
			}
		}
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { fired = true })
		sel.AddReceive(changed, func(c workflow.ReceiveChannel, _ bool) { *pending = receiveAll(ctx, c, *pending) })
		sel.Select(ctx)
		if ctx.Err() != nil {
			// Cancelled by an operator: the watcher starts the loop again
			// when it next starts.
			return ctx.Err()
		}
	}
	return nil
}

// pass runs one pass and shows what it did in the UI. A pass that fails
// (the API server is away) is logged and not counted: the next one covers
// its window.
func pass(ctx workflow.Context, p activities.Pass) (activities.Passed, bool) {
	var h *activities.HealthChecks
	var done activities.Passed
	if err := workflow.ExecuteLocalActivity(ctx, h.CheckServices, p).Get(ctx, &done); err != nil && ctx.Err() == nil {
		workflow.GetLogger(ctx).Warn("a health-check pass failed; the next one covers its window", "error", err)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("the last pass failed: %v", err))
		return done, false
	} else if err != nil {
		return done, false
	}
	details := fmt.Sprintf("last pass at %s: %d services, %d checked, %d container checks running",
		workflow.Now(ctx).UTC().Format(time.RFC3339), done.Services, done.Checked, done.Running)
	if len(done.Changes) > 0 {
		details += "\n\n" + strings.Join(done.Changes, "\n")
	}
	workflow.SetCurrentDetails(ctx, details)
	return done, true
}

// receiveAll takes a signal and every one already waiting.
func receiveAll(ctx workflow.Context, c workflow.ReceiveChannel, into []string) []string {
	var name string
	c.Receive(ctx, &name)
	return drain(c, append(into, name))
}

func drain(c workflow.ReceiveChannel, into []string) []string {
	var name string
	for c.ReceiveAsync(&name) {
		into = append(into, name)
	}
	return into
}
