package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// Retries that show. A step's local activity retries a transient error a
// couple of times inside the workflow task, which covers a blip. When the
// error lasts, the workflow retries the step itself: on durable timers
// named for the retry (a poll's are named for the poll), with the attempt
// and the error written to the resource's status and to the run's current
// details, until the operation's deadline (the plan's
// maximum_polling_duration). Then the operation fails with that error.
//
// stepRetryMax is low because most lasting errors are a part that is away
// (the API server restarting, a cluster unreachable): once it is back, the
// step goes on within stepRetryMax, at the price of six attempts a minute
// while it is not.
const (
	stepRetryFirst = 2 * time.Second
	stepRetryMax   = 10 * time.Second
)

// operatorView is the change that made a run's retries visible and its
// outcome its own: it fails with a failed operation and returns a Result
// otherwise. Runs begun before it keep the old path: a step's retries are
// the local activity's own, up to ten minutes and never shown, and a run
// completes whatever the outcome.
const operatorView = "operator-view"

// steps runs the steps of one operation on a target.
type steps struct {
	t        lifecycle.Target
	op       lifecycle.Operation
	deadline time.Time
	visible  bool // false for runs begun before operatorView
}

// backoff is how a step that asks again waits, until a deadline: on
// durable timers named for what it waits for, each wait twice the last up
// to most (first == most waits the same each time), never past the
// deadline. Polls, retries, the wait for a cluster and the wait for an
// instance's bindings all wait this way.
type backoff struct {
	deadline   time.Time
	wait, most time.Duration
}

func newBackoff(deadline time.Time, first, most time.Duration) *backoff {
	return &backoff{deadline: deadline, wait: first, most: most}
}

// left is the time until the deadline: none or less once it has passed.
func (b *backoff) left(ctx workflow.Context) time.Duration {
	return b.deadline.Sub(workflow.Now(ctx))
}

// sleep waits the next wait, or left if that is less, on a timer named
// what; the wait after it is twice as long, up to most.
func (b *backoff) sleep(ctx workflow.Context, s *steps, left time.Duration, what string) error {
	if err := s.sleep(ctx, min(b.wait, left), what); err != nil {
		return err
	}
	b.wait = min(2*b.wait, b.most)
	return nil
}

// newSteps decides, once per run, whether its retries are visible.
func newSteps(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation, maxPolling time.Duration) *steps {
	return &steps{
		t: t, op: op,
		deadline: workflow.Now(ctx).Add(maxPolling),
		visible:  workflow.GetVersion(ctx, operatorView, workflow.DefaultVersion, 1) >= 1,
	}
}

// run runs one step, named what ("apply", "check the status"), whose local
// activity start returns; its result goes to out.
func (s *steps) run(ctx workflow.Context, what string, start func(workflow.Context) workflow.Future, out any) error {
	if !s.visible {
		return start(ctx).Get(ctx, out)
	}
	ctx = workflow.WithLocalActivityOptions(ctx, briefRetries)
	var a *activities.Operations
	retries := newBackoff(s.deadline, stepRetryFirst, stepRetryMax)
	for attempt := 1; ; attempt++ {
		err := start(ctx).Get(ctx, out)
		if err == nil || !transient(err) {
			if attempt > 1 {
				workflow.SetCurrentDetails(ctx, "")
			}
			return err
		}
		left := retries.left(ctx)
		if left <= 0 {
			return temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%s kept failing until the plan's maximum_polling_duration ran out (%d attempts): %s", what, attempt, message(err)),
				KindRetriesExhausted, nil)
		}
		retrying := fmt.Sprintf("retrying %s (attempt %d failed): %s", what, attempt, message(err))
		workflow.SetCurrentDetails(ctx, retrying)
		// Best effort: the retry goes on even if the status cannot say so.
		_ = workflow.ExecuteLocalActivity(withPatientRetries(ctx), a.RecordRetry, s.t, s.op, retrying).Get(ctx, nil)
		if err := retries.sleep(ctx, s, left, "retry "+what); err != nil {
			return err
		}
	}
}

// transient tells an error that a later attempt may not meet again.
func transient(err error) bool {
	if _, permanent := activities.Permanent(err); permanent {
		return false
	}
	var canceled *temporal.CanceledError
	return !errors.As(err, &canceled)
}

// message is an activity error's own message, without Temporal's wrapping.
func message(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) && errors.Unwrap(actErr) != nil {
		return errors.Unwrap(actErr).Error()
	}
	return err.Error()
}

// How long one attempt of a local activity may take on a live worker.
// They bound a step that hangs (an API server that accepts and never
// answers), not a dead worker: that one is noticed when its workflow task
// times out (runs.WorkflowTaskTimeout), whatever the step.
const (
	// stepTimeout: apply, observe, delete, schedule. An apply may render a
	// chart and write many objects, each after a read (the fence).
	stepTimeout = 30 * time.Second
	// recordTimeout: begin, record, finish, and the steps of claims and
	// usages: a few reads and one or two writes.
	recordTimeout = 10 * time.Second
	// laRetryMax bounds the wait between the attempts of a step that must
	// get through (begin, record, finish, a claim's or usage's steps): once
	// the API server is back, the step goes on within it. It is just over
	// the workflow task timeout on purpose: the SDK waits out a backoff
	// within that timeout inside the workflow task, and a longer one on a
	// durable timer, so a step that keeps failing lets its workflow task go
	// after its first five attempts (15 s) instead of holding it.
	laRetryMax = runs.WorkflowTaskTimeout + time.Second
)

// briefRetries retries a step's transient error twice inside the workflow
// task; the workflow retries it visibly after that.
var briefRetries = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: 2 * time.Minute,
	StartToCloseTimeout:    stepTimeout,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    500 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumAttempts:    3,
	},
}

// withPatientRetries sets the options of the steps that must get through
// (begin, record, finish): transient API errors are retried for up to ten
// minutes, the first attempts (about 15 s) inside the workflow task and
// the later ones after durable timers (laRetryMax), so that a step that
// keeps failing does not hold its task; errors that retrying cannot fix
// are not retried.
func withPatientRetries(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 10 * time.Minute,
		StartToCloseTimeout:    recordTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    laRetryMax,
		},
	})
}

// sleep waits on a durable timer; in runs begun after operatorView the
// timer is named for what it waits for, so that the history tells polls,
// waits and retries apart.
func (s *steps) sleep(ctx workflow.Context, d time.Duration, what string) error {
	if !s.visible {
		return workflow.Sleep(ctx, d)
	}
	return workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: what}).Get(ctx, nil)
}

// retriedUntilDone gives the local activities of a workflow that lives as
// long as its resource (a claim, a usage) retries for as long as it takes
// (a day at most): a step that fails because the API server is away is
// tried again, and such a workflow fails only on a bug.
func retriedUntilDone(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    recordTimeout,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: laRetryMax},
	})
}
