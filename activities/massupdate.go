package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// MassUpdates holds the activities of the MassUpdate workflow; the
// updates themselves are the instances' own Update runs, which
// UpdateInstances starts and awaits.
type MassUpdates struct {
	Client    ctrlclient.Client
	Offerings Offerings
	// Temporal starts the Update runs.
	Temporal client.Client
	// Versioned says the worker is a build of a worker deployment: it then
	// starts no run eagerly, since a run started so lands on this worker's
	// build whatever build the deployment routes new runs to.
	Versioned bool
}

// MassHeartbeatEvery is how often UpdateInstances tells Temporal it is
// alive while it waits, which also names the runs it started. Most
// batches end sooner, and send none: a heartbeat is a write to the run.
const MassHeartbeatEvery = 2 * time.Second

// SelectInstances lists the instances a run updates now, and counts those
// already current.
func (m *MassUpdates) SelectInstances(ctx context.Context, sel massupdate.Selector) (massupdate.Selection, error) {
	return massupdate.Select(ctx, m.Client, m.Offerings, sel)
}

// UpdateInstances starts each target's Update run, as the watcher starts
// one for a change of the instance (the instance's workflow ID is its
// lock), and waits for them all to end. An instance another run holds is
// Busy. A retry, after the worker died or stopped, waits for the runs its
// heartbeat named instead of starting them again.
func (m *MassUpdates) UpdateInstances(ctx context.Context, b massupdate.Batch) ([]massupdate.Outcome, error) {
	var earlier map[string]string // workflow ID to run ID, of an earlier attempt
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &earlier) // unreadable: start them again, found busy at worst
	}
	out := make([]massupdate.Outcome, len(b.Targets))
	started := map[string]string{}
	var wg sync.WaitGroup
	errs := make([]error, len(b.Targets))
	tick := time.NewTicker(MassHeartbeatEvery)
	defer tick.Stop()
	for i, t := range b.Targets {
		select {
		case <-tick.C: // starting is slow: the server is loaded
			activity.RecordHeartbeat(ctx, started)
		default:
		}
		run, err := m.startUpdate(ctx, b.MassUpdate, t, earlier)
		var running *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &running) {
			out[i].Busy = true
			continue
		}
		if err != nil {
			activity.RecordHeartbeat(ctx, started) // the next attempt waits for those
			return nil, fmt.Errorf("starting the update of %s: %w", t, err)
		}
		started[run.GetID()] = run.GetRunID()
		wg.Go(func() { out[i], errs[i] = awaitUpdate(ctx, run) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			activity.RecordHeartbeat(ctx, started)
		case <-activity.GetWorkerStopChannel(ctx):
			// The Update runs cannot move on this worker any more: the next
			// attempt, on another, waits for them. The SDK sends this
			// heartbeat before the worker stops.
			activity.RecordHeartbeat(ctx, started)
			return nil, temporal.NewApplicationError("the worker is stopping; the next attempt waits for these updates", "WorkerStopping")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("waiting for the updates: %w", err)
	}
	return out, nil
}

// startUpdate starts t's Update run, or takes up the one an earlier
// attempt started.
func (m *MassUpdates) startUpdate(ctx context.Context, massUpdate string, t massupdate.Target, earlier map[string]string) (client.WorkflowRun, error) {
	target := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: t.Namespace, Name: t.Name}
	id := runs.WorkflowID(target)
	if runID, ok := earlier[id]; ok {
		return m.Temporal.GetWorkflow(ctx, id, runID), nil
	}
	opts := runs.OperationOptions(target, lifecycle.OpUpdate, fairness.MassUpdate(massUpdate), fmt.Sprintf("update %s (mass update %s)", t, massUpdate), runs.AttrPlan.ValueSet(t.PlanID))
	// Behind users' operations, a user's update of the same plan included.
	opts.Priority.PriorityKey = fairness.Background
	opts.EnableEagerStart = opts.EnableEagerStart && !m.Versioned
	return m.Temporal.ExecuteWorkflow(ctx, opts, runs.WorkflowType(lifecycle.OpUpdate), target)
}

// awaitUpdate waits for an Update run to end. A run that failed is an
// outcome; only failing to learn how it ended is an error.
func awaitUpdate(ctx context.Context, run client.WorkflowRun) (massupdate.Outcome, error) {
	var res struct {
		State string `json:"state"` // workflows.Result's
	}
	err := run.Get(ctx, &res)
	var failed *temporal.WorkflowExecutionError
	switch {
	case errors.As(err, &failed):
		return massupdate.Outcome{Failure: FailureText(err)}, nil
	case err != nil:
		return massupdate.Outcome{}, fmt.Errorf("waiting for %s: %w", run.GetID(), err)
	}
	return massupdate.Outcome{State: res.State}, nil
}

// FailureText is the description of a failed run: its failure's message.
func FailureText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}
