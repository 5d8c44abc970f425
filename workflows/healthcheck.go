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

// passesPerRun bounds a run's history: a loop continues as new after
// this many passes (a few thousand events), or sooner if Temporal asks
// (GetContinueAsNewSuggested, which is also how tests make it continue).
const passesPerRun = 500

// firstTick is the wait before the first pass's answer says how long.
const firstTick = 5 * time.Second

// recentChanges is how many changes of state the current details show.
const recentChanges = 20

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
func HealthChecks(ctx workflow.Context, in runs.HealthChecksInput) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// A pass probes every service of the shard whose instant has come,
		// each probe bounded by its own timeout: many at once may take a
		// while. The workflow task is extended while it runs, so a dead
		// worker is still noticed within runs.WorkflowTaskTimeout.
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 3},
	})
	l := &loop{in: in, changed: workflow.GetSignalChannel(ctx, runs.SignalServiceChanged)}
	if l.in.Tick <= 0 {
		l.in.Tick = firstTick
	}
	for passes := 0; passes < passesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		if err := l.waitTick(ctx); err != nil {
			return err
		}
		now := workflow.Now(ctx)
		from := l.in.Last
		if from.IsZero() {
			from = now.Add(-l.in.Tick)
		}
		if done, ok := l.pass(ctx, activities.Pass{Shard: in.Shard, From: from, To: now}); ok {
			l.in.Last, l.in.Tick = now, done.Tick
		}
	}
	l.in.Pending = drain(l.changed, l.in.Pending)
	return workflow.NewContinueAsNewError(ctx, HealthChecks, l.in)
}

// loop is a running loop: its input as it goes on, and its signals.
type loop struct {
	in      runs.HealthChecksInput
	changed workflow.ReceiveChannel
}

// waitTick waits out the tick, checking at once each service signalled
// meanwhile. When such a pass asks for a shorter tick (an empty shard that
// got its first service waits a minute, a busy one seconds), the wait is
// cut short to it.
func (l *loop) waitTick(ctx workflow.Context) error {
	deadline := workflow.Now(ctx).Add(l.in.Tick)
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer func() { cancel() }()
	timer := workflow.NewTimer(timerCtx, l.in.Tick)
	for fired := false; !fired; {
		if len(l.in.Pending) > 0 {
			done, ok := l.pass(ctx, activities.Pass{Shard: l.in.Shard, Services: l.in.Pending})
			l.in.Pending = nil
			if ok && done.Tick > 0 && workflow.Now(ctx).Add(done.Tick).Before(deadline) {
				cancel()
				l.in.Tick, deadline = done.Tick, workflow.Now(ctx).Add(done.Tick)
				timerCtx, cancel = workflow.WithCancel(ctx)
				timer = workflow.NewTimer(timerCtx, done.Tick)
			}
		}
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { fired = true })
		sel.AddReceive(l.changed, func(c workflow.ReceiveChannel, _ bool) { l.in.Pending = receiveAll(ctx, c, l.in.Pending) })
		sel.Select(ctx)
		if ctx.Err() != nil {
			// Cancelled by an operator: the watcher starts the loop again
			// when it next starts.
			return ctx.Err()
		}
	}
	return nil
}

// pass runs one pass and shows what it did in the UI, with the latest
// changes of state. A pass that fails (the API server is away) is logged
// and not counted: the next one covers its window.
func (l *loop) pass(ctx workflow.Context, p activities.Pass) (activities.Passed, bool) {
	var h *activities.HealthChecks
	var done activities.Passed
	err := workflow.ExecuteLocalActivity(ctx, h.CheckServices, p).Get(ctx, &done)
	now := workflow.Now(ctx).UTC()
	switch {
	case err != nil && ctx.Err() != nil:
		return done, false
	case err != nil:
		workflow.GetLogger(ctx).Warn("a health-check pass failed; the next one covers its window", "error", err)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("the pass at %s failed: %v\n\n%s", now.Format(time.RFC3339), err, l.recent()))
		return done, false
	}
	for _, c := range done.Changes {
		l.in.Recent = append([]string{now.Format(time.TimeOnly) + " " + c}, l.in.Recent...)
	}
	if done.MoreChanges > 0 {
		l.in.Recent = append([]string{fmt.Sprintf("%s and %d more", now.Format(time.TimeOnly), done.MoreChanges)}, l.in.Recent...)
	}
	l.in.Recent = l.in.Recent[:min(len(l.in.Recent), recentChanges)]
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("last pass at %s: %d services, %d checked, %d container checks running\n\n%s",
		now.Format(time.RFC3339), done.Services, done.Checked, done.Running, l.recent()))
	return done, true
}

// recent lists the latest changes of state for the details.
func (l *loop) recent() string {
	if len(l.in.Recent) == 0 {
		return "no service has changed state lately"
	}
	return "latest changes of state (UTC):\n" + strings.Join(l.in.Recent, "\n")
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
