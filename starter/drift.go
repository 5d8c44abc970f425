package starter

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/workflows/runs"
)

// DriftChecks keeps the drift-check loops of the instances: every shard's
// loop runs, whether or not a plan asks for checks yet (a plan may start
// to at any time, and the loop reads the plans on each pass). Unlike the
// health checks, nothing is signalled: an instance's check comes at its
// instant, and an operation that changes it applies (and records) it
// anew.
type DriftChecks struct {
	Temporal client.Client
}

// setupDriftChecks registers the runnable that starts the loops, and has
// keep start again a loop that Temporal lost.
func setupDriftChecks(mgr ctrl.Manager, tc client.Client, keep *Loops) error {
	d := &DriftChecks{Temporal: tc}
	keep.add(runKind{name: loops.DriftChecks, workflowType: runs.DriftChecksType, wants: d.loops, wake: d.startLoop})
	return mgr.Add(manager.RunnableFunc(d.ensureLoops))
}

// ensureLoops starts every shard's loop that is not running.
func (d *DriftChecks) ensureLoops(ctx context.Context) error {
	wants, _ := d.loops(ctx)
	return ensureRuns(ctx, "drift-check loops", wants, d.startLoop)
}

// loops are the runs the drift checks call for: one loop per shard.
func (d *DriftChecks) loops(context.Context) ([]loops.Want, error) {
	out := make([]loops.Want, 0, drift.Shards)
	for shard := range drift.Shards {
		out = append(out, loops.Want{ID: runs.DriftChecksID(shard), Shard: shard})
	}
	return out, nil
}

// startLoop starts the loop of a shard, or leaves the one running.
func (d *DriftChecks) startLoop(ctx context.Context, w loops.Want) error {
	if _, err := d.Temporal.ExecuteWorkflow(ctx, runs.DriftChecksOptions(w.Shard), runs.DriftChecksType, runs.DriftChecksInput{Shard: w.Shard}); err != nil {
		return fmt.Errorf("starting the drift-check loop %s: %w", w.ID, err)
	}
	return nil
}
