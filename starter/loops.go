package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/workflows/runs"
)

// DefaultLoopCheckPeriod is how often the watcher looks for long-lived
// runs that Temporal no longer has. A lost run is noticed within one
// period and started again at loopWakeRate.
const DefaultLoopCheckPeriod = 30 * time.Second

// loopWakeRate bounds how fast lost runs are started again: at ten
// thousand objects, a Temporal restored empty would otherwise take ten
// thousand starts at once, on top of the operations going on. At this
// rate they come back in under four minutes.
const loopWakeRate = 50

// loopListPage is the page size of the visibility lists: ten pages a kind
// and a pass at ten thousand objects.
const loopListPage = 1000

// runKind is one kind of long-lived run that the watcher keeps: how to
// know which runs the resources call for, and how to start one again.
type runKind struct {
	// name labels the kind in the metric and the log (loops.Claim, …).
	name string
	// workflowType is the runs' registered type, which visibility lists;
	// query, when set, lists them instead (runs of several types), as it
	// says, endedCounts or not.
	workflowType, query string
	// endedCounts: a run that ended is done (a one-off run); otherwise
	// only a running run counts.
	endedCounts bool
	// wants lists the runs the resources call for, from the cache.
	wants func(ctx context.Context) ([]loops.Want, error)
	// wake starts the run again, as the kind's reconciler would.
	wake func(ctx context.Context, w loops.Want) error
}

// Loops re-establishes the long-lived runs Temporal lost. Kubernetes is
// the source of truth, and the watcher starts each long-lived run on an
// event of its resource; after Temporal's state is lost (a database
// restored empty, a namespace recreated) or a run is terminated by hand,
// no event comes, and without this the run would never return: a
// registered service would keep its last state for good. Every period,
// each kind's running runs are listed through visibility (a few pages,
// whatever the number of objects), compared with what the cache calls
// for, and each one missing is confirmed by its own description (so a run
// started a moment ago, which visibility may not list yet, is not started
// twice) and woken. It counts what it re-establishes in
// qm_runs_reestablished_total.
type Loops struct {
	Temporal client.Client
	// Period is how often it looks (DefaultLoopCheckPeriod when zero).
	Period time.Duration
	// Namespace, when set, has each look register the search attributes
	// that the namespace lacks first: one registered anew has none.
	Namespace string

	kinds   []runKind
	limiter *rate.Limiter
}

// newLoops returns the keeper of no kinds yet; each capability's setup
// adds its own.
func newLoops(tc client.Client, period time.Duration, namespace string) *Loops {
	if period <= 0 {
		period = DefaultLoopCheckPeriod
	}
	return &Loops{Temporal: tc, Period: period, Namespace: namespace, limiter: rate.NewLimiter(loopWakeRate, loopWakeRate)}
}

// add registers a kind of run.
func (l *Loops) add(k runKind) { l.kinds = append(l.kinds, k) }

// setupLoops adds the keeper to the manager, once every kind is added.
func setupLoops(mgr ctrl.Manager, l *Loops) error {
	if err := mgr.Add(l); err != nil {
		return fmt.Errorf("adding the keeper of the long-lived runs: %w", err)
	}
	return nil
}

// NeedLeaderElection is true: the leader keeps the runs, as it starts them.
func (l *Loops) NeedLeaderElection() bool { return true }

// Start looks once a period until the watcher stops. The first look is a
// period after it leads: the reconcilers' first events wake every
// object's run then anyway.
func (l *Loops) Start(ctx context.Context) error {
	tick := time.NewTicker(l.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			l.Pass(ctx)
		}
	}
}

// Pass looks at every kind once and starts again what is missing. A kind
// that cannot be looked at (Temporal unreachable, visibility failing) is
// logged and looked at on the next pass.
func (l *Loops) Pass(ctx context.Context) {
	if l.Namespace != "" {
		if err := runs.EnsureSearchAttributes(ctx, l.Temporal, l.Namespace); err != nil && ctx.Err() == nil {
			slog.Default().Warn("could not check the namespace's search attributes", "namespace", l.Namespace, "error", err.Error())
		}
	}
	for _, k := range l.kinds {
		if err := l.keep(ctx, k); err != nil && ctx.Err() == nil {
			slog.Default().Warn("could not look for lost runs", "kind", k.name, "error", err.Error())
		}
	}
}

// keep re-establishes the runs of one kind that are missing.
func (l *Loops) keep(ctx context.Context, k runKind) error {
	wants, err := k.wants(ctx)
	if err != nil || len(wants) == 0 {
		return err
	}
	listed, err := l.listed(ctx, k)
	if err != nil {
		return err
	}
	for _, w := range loops.Suspects(wants, listed) {
		status, err := l.status(ctx, w.ID)
		if err != nil {
			return err
		}
		if !loops.Decide(w, status, k.endedCounts) {
			continue
		}
		if err := l.limiter.Wait(ctx); err != nil {
			return err
		}
		if err := k.wake(ctx, w); err != nil {
			return fmt.Errorf("starting %s again: %w", w.ID, err)
		}
		metrics.RunReestablished(k.name)
		slog.Default().Info("started a lost run again from its resource", "kind", k.name, "workflowID", w.ID)
	}
	return nil
}

// listed is the workflow IDs visibility lists for the kind: those running,
// or with endedCounts every one Temporal keeps.
func (l *Loops) listed(ctx context.Context, k runKind) (map[string]bool, error) {
	query := k.query
	if query == "" {
		query = fmt.Sprintf("WorkflowType = %q", k.workflowType)
		if !k.endedCounts {
			query += " AND ExecutionStatus = 'Running'"
		}
	}
	ids := map[string]bool{}
	var token []byte
	for {
		resp, err := l.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: loopListPage, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("listing the %s runs: %w", k.name, err)
		}
		for _, e := range resp.GetExecutions() {
			ids[e.GetExecution().GetWorkflowId()] = true
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
	}
}

// status is what Temporal says of the latest run under id.
func (l *Loops) status(ctx context.Context, id string) (loops.Status, error) {
	resp, err := l.Temporal.DescribeWorkflowExecution(ctx, id, "")
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing):
		return loops.NotFound, nil
	case err != nil:
		return 0, fmt.Errorf("describing %s: %w", id, err)
	}
	switch resp.GetWorkflowExecutionInfo().GetStatus() {
	case enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return loops.Running, nil
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return loops.Completed, nil
	default:
		return loops.Ended, nil
	}
}

// objectRuns lists list from the cache and returns the run each object
// calls for, under id(namespace, name): every object that settled says
// should have one, and every object being deleted that still holds
// finalizer, which only its run takes away.
func objectRuns(ctx context.Context, c ctrlclient.Reader, list ctrlclient.ObjectList, id func(namespace, name string) string,
	finalizer string, settled func(ctrlclient.Object) bool) ([]loops.Want, error) {
	if err := c.List(ctx, list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing %T: %w", list, err)
	}
	var out []loops.Want
	err := meta.EachListItem(list, func(item runtime.Object) error {
		obj := item.(ctrlclient.Object)
		deleting := !obj.GetDeletionTimestamp().IsZero()
		if deleting && !controllerutil.ContainsFinalizer(obj, finalizer) || !deleting && settled != nil && !settled(obj) {
			return nil
		}
		out = append(out, loops.Want{ID: id(obj.GetNamespace(), obj.GetName()), Namespace: obj.GetNamespace(), Name: obj.GetName(), Deleting: deleting})
		return nil
	})
	return out, err
}

// byRequest starts a lost run as the reconciler wake does for an event
// of the run's object.
func byRequest(wake func(context.Context, ctrl.Request) (ctrl.Result, error)) func(context.Context, loops.Want) error {
	return func(ctx context.Context, w loops.Want) error {
		_, err := wake(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
		return err
	}
}
