package workflows

import (
	"cmp"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// massStartsPerRun bounds a run's history (each child, or each batch of
// updates, is about six of its events): after starting this many, a run
// lets those in flight end and continues as new.
const massStartsPerRun = 1500

// updatesInBatches is the change that has a run start its updates in
// batches, each an activity, instead of as its children.
const updatesInBatches = "updates-in-batches"

const (
	// maxListedFailures bounds the failures a run lists (it counts all).
	maxListedFailures = 100
	// busyRetry is the first wait before an instance busy with another
	// operation is tried again; it doubles up to busyRetryMax.
	busyRetry, busyRetryMax = 2 * time.Second, 30 * time.Second
	// detailsEvery is how often the progress shown in the UI is renewed.
	detailsEvery = 2 * time.Second
)

// MassUpdateInput is a mass update's request (what the API and the
// watcher start it with), and Carry, where a run that continued as new
// stood.
type MassUpdateInput struct {
	massupdate.Request
	Carry *MassUpdateCarry `json:"carry,omitempty"`
}

// MassUpdateCarry is what a run hands to the run it continues as.
type MassUpdateCarry struct {
	Progress   massupdate.Progress `json:"progress"`
	Pending    massupdate.Targets  `json:"pending,omitempty"`
	Accepted   int                 `json:"accepted,omitempty"`
	CanaryDone bool                `json:"canaryDone,omitempty"`
}

// busy is an instance that another operation holds, to try again.
type busy struct {
	target   massupdate.Target
	notSoon  time.Time
	attempts int
}

// massRun is one run of a mass update, between its start and its end or
// its continuation.
type massRun struct {
	in        MassUpdateInput
	carry     MassUpdateCarry
	sel       workflow.Selector
	busy      []busy
	lastStart time.Time
	starts    int       // updates started by this run
	batches   int       // batches started by this run
	shown     time.Time // when the progress was last shown
	waking    bool      // a timer is set to look again
	draining  bool      // no new starts: continuing as new once none is in flight
	batched   bool      // updates start in batches (else as children: runs begun before)
	batch     []busy    // updates to start in batches when this workflow task ends
}

// MassUpdate updates every instance a selector selects, each through its
// own Update run (the instance's workflow ID is its lock, and its status
// and last_operation behave as for any update), at most Concurrency at a
// time:
//
//  1. select the instances, skipping those already rendered from their
//     plan's generation;
//  2. start updates while fewer than Concurrency are in flight (at Rate,
//     if set; first only Canary of them, then pause), in batches, each an
//     activity that starts its Update runs and waits for them;
//  3. as each ends, count it; pause once MaxFailures have failed;
//  4. obey pause, resume, cancel and concurrency as they come (signal
//     "steer"), and answer "progress" queries;
//  5. continue as new before the history grows long; end when none is left.
func MassUpdate(ctx workflow.Context, in MassUpdateInput) (massupdate.Progress, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// Selecting lists the instances once; a minute is room for many
		// thousands on a loaded API server.
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 10},
	})
	r := &massRun{in: in, sel: workflow.NewSelector(ctx)}
	r.batched = workflow.GetVersion(ctx, updatesInBatches, workflow.DefaultVersion, 1) == 1
	if in.Carry != nil {
		r.carry = *in.Carry
	} else if err := r.selectInstances(ctx); err != nil {
		return massupdate.Progress{}, err
	}
	if err := workflow.SetQueryHandler(ctx, runs.QueryProgress, func() (massupdate.Progress, error) {
		return r.progress(ctx), nil
	}); err != nil {
		return massupdate.Progress{}, err
	}
	steer := workflow.GetSignalChannel(ctx, runs.SignalSteer)
	r.sel.AddReceive(steer, func(c workflow.ReceiveChannel, _ bool) {
		var s massupdate.Steer
		c.Receive(ctx, &s)
		r.steer(ctx, s)
	})
	r.setState(ctx, r.carry.Progress.State, r.carry.Progress.Reason)
	for {
		r.startWhatMay(ctx)
		p := &r.carry.Progress
		if p.InFlight == 0 && (p.State == massupdate.Cancelled || len(r.carry.Pending) == 0 && len(r.busy) == 0) {
			break
		}
		if r.draining && p.InFlight == 0 {
			r.carry.Pending = append(r.carry.Pending, r.busyTargets()...)
			next := r.in
			next.Carry = &r.carry
			return massupdate.Progress{}, workflow.NewContinueAsNewError(ctx, runs.MassUpdateType, next)
		}
		r.sel.Select(ctx)
	}
	if r.carry.Progress.State != massupdate.Cancelled {
		r.setState(ctx, massupdate.Completed, "")
	}
	return r.progress(ctx), nil
}

// selectInstances lists what the run updates.
func (r *massRun) selectInstances(ctx workflow.Context) error {
	var a *activities.MassUpdates
	var s massupdate.Selection
	if err := workflow.ExecuteLocalActivity(ctx, a.SelectInstances, r.in.Selector).Get(ctx, &s); err != nil {
		return fmt.Errorf("selecting the instances: %w", err)
	}
	r.carry = MassUpdateCarry{Pending: s.Targets, Progress: massupdate.Progress{
		State: massupdate.Running, Total: len(s.Targets) + s.Skipped, Skipped: s.Skipped,
		Concurrency: r.in.Concurrency, Started: workflow.Now(ctx),
	}}
	if r.carry.Progress.Concurrency < 1 {
		r.carry.Progress.Concurrency = massupdate.DefaultConcurrency
	}
	return nil
}

// startWhatMay starts updates while the run may: running, under its
// concurrency, its rate and its canary.
func (r *massRun) startWhatMay(ctx workflow.Context) {
	defer r.startBatches(ctx)
	p := &r.carry.Progress
	for p.State == massupdate.Running && !r.draining && p.InFlight < p.Concurrency {
		if r.in.Canary > 0 && !r.carry.CanaryDone && p.Succeeded+p.Failed+p.InFlight >= r.in.Canary {
			return
		}
		now := workflow.Now(ctx)
		if r.in.Rate > 0 {
			if next := r.lastStart.Add(time.Duration(float64(time.Second) / r.in.Rate)); now.Before(next) {
				r.wakeAt(ctx, next)
				return
			}
		}
		t, ok := r.next(ctx, now)
		if !ok {
			return
		}
		r.start(ctx, t)
		r.lastStart = now
		if r.starts++; !r.batched && r.starts >= massStartsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			r.draining = true
		}
	}
}

// next takes the next instance to start: a busy one whose wait is over,
// or the next pending one.
func (r *massRun) next(ctx workflow.Context, now time.Time) (busy, bool) {
	for i, b := range r.busy {
		if !now.Before(b.notSoon) {
			r.busy = append(r.busy[:i], r.busy[i+1:]...)
			return b, true
		}
	}
	if len(r.carry.Pending) > 0 {
		t := r.carry.Pending[0]
		r.carry.Pending = r.carry.Pending[1:]
		return busy{target: t}, true
	}
	if len(r.busy) > 0 {
		r.wakeAt(ctx, r.busy[0].notSoon)
	}
	return busy{}, false
}

// ended counts an update that ended, or sets a busy instance aside.
func (r *massRun) ended(ctx workflow.Context, b busy, o massupdate.Outcome) {
	p := &r.carry.Progress
	switch {
	case o.Busy:
		b.attempts++
		b.notSoon = workflow.Now(ctx).Add(min(busyRetry<<(b.attempts-1), busyRetryMax))
		r.busy = append(r.busy, b)
		return
	case o.Failure != "":
		p.Failed++
		if len(p.Failures) < maxListedFailures {
			p.Failures = append(p.Failures, massupdate.Failure{Instance: b.target.String(), Description: o.Failure})
		}
	case o.State == "":
		p.Skipped++ // current already: its Update ended at its first step
	default:
		p.Succeeded++
	}
	if r.in.Canary > 0 && !r.carry.CanaryDone && p.Succeeded+p.Failed >= r.in.Canary && p.InFlight == 0 {
		r.carry.CanaryDone = true
		if len(r.carry.Pending) > 0 && p.State == massupdate.Running {
			r.setState(ctx, massupdate.Paused, fmt.Sprintf("canary: %d updated; resume to update the other %d", r.in.Canary, len(r.carry.Pending)))
		}
	}
	if limit := r.in.MaxFailures.Limit(p.Total); limit > 0 && p.Failed-r.carry.Accepted >= limit && p.State == massupdate.Running {
		r.setState(ctx, massupdate.Paused, fmt.Sprintf("%d updates failed (maxFailures %s); resume to go on, or cancel", p.Failed, r.in.MaxFailures))
	}
	r.showProgress(ctx, false)
}

// showProgress puts the progress in the run's current details, which the
// UI shows: at most every detailsEvery while the counts move (each change
// is written with the workflow task), at once when the state changes.
func (r *massRun) showProgress(ctx workflow.Context, now bool) {
	if t := workflow.Now(ctx); now || t.Sub(r.shown) >= detailsEvery {
		r.shown = t
		workflow.SetCurrentDetails(ctx, r.progress(ctx).Line())
	}
}

// steer obeys a steering signal.
func (r *massRun) steer(ctx workflow.Context, s massupdate.Steer) {
	p := &r.carry.Progress
	switch s.Action {
	case massupdate.Pause:
		if p.State == massupdate.Running {
			r.setState(ctx, massupdate.Paused, cmp.Or(s.Reason, "paused by the operator"))
		}
	case massupdate.Resume:
		if p.State == massupdate.Paused {
			r.carry.Accepted = p.Failed
			r.carry.CanaryDone = true
			r.setState(ctx, massupdate.Running, "")
		}
	case massupdate.Cancel:
		if p.State == massupdate.Running || p.State == massupdate.Paused {
			r.carry.Pending, r.busy = nil, nil
			r.setState(ctx, massupdate.Cancelled, cmp.Or(s.Reason, "cancelled by the operator"))
		}
	case massupdate.SetConcurrency:
		if s.Concurrency > 0 {
			p.Concurrency = s.Concurrency
		}
	default:
		workflow.GetLogger(ctx).Warn("unknown steering signal ignored", "action", s.Action)
		return
	}
	p.Record(s, workflow.Now(ctx))
}

// setState records the run's state, on the run and in its search
// attribute.
func (r *massRun) setState(ctx workflow.Context, state, reason string) {
	r.carry.Progress.State, r.carry.Progress.Reason = state, reason
	if err := workflow.UpsertTypedSearchAttributes(ctx, runs.AttrState.ValueSet(state)); err != nil {
		workflow.GetLogger(ctx).Warn("setting the state's search attribute", "error", err)
	}
	r.showProgress(ctx, true)
}

// wakeAt has the run look again at t, unless a wake is already set.
func (r *massRun) wakeAt(ctx workflow.Context, t time.Time) {
	if r.waking {
		return
	}
	r.waking = true
	r.sel.AddFuture(workflow.NewTimer(ctx, max(t.Sub(workflow.Now(ctx)), time.Millisecond)), func(workflow.Future) { r.waking = false })
}

// busyTargets are the instances set aside, for the next run.
func (r *massRun) busyTargets() []massupdate.Target {
	out := make([]massupdate.Target, 0, len(r.busy))
	for _, b := range r.busy {
		out = append(out, b.target)
	}
	r.busy = nil
	return out
}

// progress is the run's progress now.
func (r *massRun) progress(ctx workflow.Context) massupdate.Progress {
	p := r.carry.Progress
	p.Remaining = len(r.carry.Pending) + len(r.busy)
	p.Measure(workflow.Now(ctx))
	return p
}
