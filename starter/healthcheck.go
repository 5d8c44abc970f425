package starter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/workflows/runs"
)

// loopStartRetry is how long ensureLoops waits before it tries again to
// start the loops Temporal did not take.
const loopStartRetry = 2 * time.Second

// HealthChecks keeps the health-check loops of the registered services:
// every shard's loop runs (ensured once the watcher leads), and a service
// that is new, changed or deleted is signalled to its loop, which checks
// it at once instead of at its next instant. A service the loop has seen
// as it is (status.observedGeneration) is not signalled again, so a
// restarted watcher signals only what changed while it was away.
type HealthChecks struct {
	Client   ctrlclient.Client
	Temporal client.Client
}

// setupHealthChecks registers the reconciler and the runnable that starts
// the loops, and has keep start again a loop that Temporal lost.
func setupHealthChecks(mgr ctrl.Manager, tc client.Client, copts reconcilerOptions, keep *Loops) error {
	h := &HealthChecks{Client: mgr.GetClient(), Temporal: tc}
	keep.add(runKind{name: loops.HealthChecks, workflowType: runs.HealthChecksType, wants: h.loops, wake: h.startLoop})
	if err := ctrl.NewControllerManagedBy(mgr).For(&primazav1alpha1.RegisteredService{}).Named("registeredservice").
		WithOptions(copts()).Complete(reconcile.Func(h.Reconcile)); err != nil {
		return fmt.Errorf("registering the RegisteredService reconciler: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(h.ensureLoops))
}

// Reconcile signals the loop of a service that its loop has not seen.
func (h *HealthChecks) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var svc primazav1alpha1.RegisteredService
	if err := h.Client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if svc.DeletionTimestamp.IsZero() && svc.Status.ObservedGeneration == svc.Generation {
		return ctrl.Result{}, nil
	}
	shard := healthcheck.Shard(svc.Namespace, svc.Name)
	_, err := h.Temporal.SignalWithStartWorkflow(ctx, runs.HealthChecksID(shard), runs.SignalServiceChanged,
		svc.Namespace+"/"+svc.Name, loopOptions(shard), runs.HealthChecksType, runs.HealthChecksInput{Shard: shard})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("signalling the health-check loop of %s: %w", req, err)
	}
	log.FromContext(ctx).V(1).Info("health-check loop signalled", "workflowID", runs.HealthChecksID(shard))
	return ctrl.Result{}, nil
}

// ensureLoops starts every shard's loop that is not running; a running
// one is left as it is.
func (h *HealthChecks) ensureLoops(ctx context.Context) error {
	wants, _ := h.loops(ctx)
	return ensureRuns(ctx, "health-check loops", wants, h.startLoop)
}

// ensureRuns starts each of wants with start. Temporal may be slow to
// answer at first (starting up, or loaded): a pass that fails is logged
// and tried again until every run is started, because a runnable that
// returned its error would stop the whole watcher with it.
func ensureRuns(ctx context.Context, what string, wants []loops.Want, start func(context.Context, loops.Want) error) error {
	err := wait.PollUntilContextCancel(ctx, loopStartRetry, true, func(ctx context.Context) (bool, error) {
		for _, w := range wants {
			if err := start(ctx, w); err != nil {
				if ctx.Err() == nil {
					slog.Default().Warn("could not start the "+what+" yet; trying again", "retryIn", loopStartRetry, "error", err.Error())
				}
				return false, nil
			}
		}
		return true, nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// loops are the runs the health checks call for: one loop per shard,
// whether or not it has services (a service may come at any time).
func (h *HealthChecks) loops(context.Context) ([]loops.Want, error) {
	out := make([]loops.Want, 0, healthcheck.Shards)
	for shard := range healthcheck.Shards {
		out = append(out, loops.Want{ID: runs.HealthChecksID(shard), Shard: shard})
	}
	return out, nil
}

// startLoop starts the loop of a shard, or leaves the one running.
func (h *HealthChecks) startLoop(ctx context.Context, w loops.Want) error {
	if _, err := h.Temporal.ExecuteWorkflow(ctx, loopOptions(w.Shard), runs.HealthChecksType, runs.HealthChecksInput{Shard: w.Shard}); err != nil {
		return fmt.Errorf("starting the health-check loop %s: %w", w.ID, err)
	}
	return nil
}

func loopOptions(shard int) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       runs.HealthChecksID(shard),
		TaskQueue:                runs.TaskQueue,
		WorkflowTaskTimeout:      runs.WorkflowTaskTimeout,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            fmt.Sprintf("health checks of the registered services of shard %d of %d", shard, healthcheck.Shards),
		Priority:                 runs.Priority(fairness.Checks, fmt.Sprintf("healthchecks/%d", shard)),
	}
}
