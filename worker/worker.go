// Package worker hosts Quartermaster's workflows and activities on a Temporal
// task queue. `qm worker` runs it; workers scale horizontally.
package worker

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"k8s.io/client-go/tools/record"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// Activities are what the worker's activities work with.
type Activities struct {
	// Kube is the (uncached) client the activities use.
	Kube ctrlclient.Client
	// Offerings finds plans and services.
	Offerings activities.Offerings
	// Templates fetches the templates plans name by url.
	Templates *plan.Fetcher
	// Bounds limit each render of a template (zero: plan.DefaultBounds).
	Bounds plan.Bounds
	// Renderer renders templates in processes it stops when they pass
	// Bounds (nil: in the worker's process).
	Renderer plan.Runner
	// HealthChecks and Claims run the registered services' checks and the
	// claims (nil: through Kube, without a cache or Events).
	HealthChecks *activities.HealthChecks
	Claims       *activities.Claims
	// Clusters reaches the registered clusters (nil: only Kube's), and
	// Scheduler chooses among them ("" or default: the one cluster).
	Clusters  *clusters.Clients
	Scheduler scheduling.Scheduler
	// Instances reads the SFServiceInstances from an informer, for the
	// scheduler and the drift checks (nil: through Kube).
	Instances ctrlclient.Reader
	// Events records scheduling decisions on instances (nil: none).
	Events record.EventRecorder
	// Catalog is the trust boundary: a plan outside it is a tenant's,
	// applied as a ServiceAccount of its namespace (tenancy).
	Catalog tenancy.Boundary
}

// Options set how the worker leaves and how soon work on a lost worker
// moves elsewhere.
type Options struct {
	// StopTimeout is how long a stopping worker (SIGTERM, a rolling
	// update) lets the tasks in hand finish after it stops polling; what
	// is left then moves to another worker when its workflow task times
	// out (runs.WorkflowTaskTimeout). Zero: DefaultStopTimeout.
	StopTimeout time.Duration
	// Versioning puts the worker in a version of the worker deployment
	// (zero: unversioned).
	Versioning Versioning
	// DeadlockTimeout is how long workflow code may run without yielding
	// before the SDK fails its task as deadlocked (zero: the SDK's 1 s).
	// A worker whose CPU is throttled or shared can take longer than that
	// over code that does not block, and each such failure puts the run's
	// next task (and every query to it) behind a retry.
	DeadlockTimeout time.Duration
}

// DefaultStopTimeout covers one attempt of the longest step a workflow
// task holds (an apply: 30 s at most); the chart's
// terminationGracePeriodSeconds is larger, so the pod is not killed first.
const DefaultStopTimeout = 30 * time.Second

// stickyTimeout is how long a workflow task waits for the worker that
// holds the run in its cache before any worker may take it. A worker that
// stops tells the server at once; this bounds the wait for one that died.
const stickyTimeout = 3 * time.Second

// New returns a worker for the Quartermaster task queue with every workflow
// and activity registered.
func New(c client.Client, a Activities, o Options) sdkworker.Worker {
	w := sdkworker.New(c, runs.TaskQueue, sdkworker.Options{
		WorkerStopTimeout:            cmp.Or(o.StopTimeout, DefaultStopTimeout),
		StickyScheduleToStartTimeout: stickyTimeout,
		DeadlockDetectionTimeout:     o.DeadlockTimeout,
		DeploymentOptions:            o.Versioning.options(),
	})
	workflows.Register(w)
	w.RegisterActivity(&activities.Kubernetes{Client: a.Kube})
	ops := &activities.Operations{Client: a.Kube, Offerings: a.Offerings, Templates: a.Templates, Bounds: a.Bounds, Renderer: a.Renderer,
		Clusters: a.Clusters, Schedules: a.Scheduler.Schedules(), Events: a.Events, Catalog: a.Catalog}
	w.RegisterActivity(ops)
	w.RegisterActivity(&activities.Rotations{Ops: ops})
	w.RegisterActivity(&activities.Scheduling{Client: a.Kube, Instances: a.Instances, Offerings: a.Offerings, Scheduler: a.Scheduler, Bounds: a.Bounds,
		Renderer: a.Renderer, Events: a.Events, Runs: ops})
	if a.HealthChecks == nil {
		a.HealthChecks = &activities.HealthChecks{Client: a.Kube}
	}
	if a.Claims == nil {
		a.Claims = &activities.Claims{Client: a.Kube}
	}
	if a.Claims.Temporal == nil {
		a.Claims.Temporal = c
	}
	w.RegisterActivity(a.HealthChecks)
	w.RegisterActivity(a.Claims)
	w.RegisterActivity(&activities.BindingUsages{Client: a.Kube, Offerings: a.Offerings})
	w.RegisterActivity(&activities.ServiceBindings{Client: a.Kube, Offerings: a.Offerings})
	w.RegisterActivity(&activities.Drift{Ops: ops, Instances: a.Instances, Temporal: c, Events: a.Events, Versioned: o.Versioning.Enabled()})
	w.RegisterActivity(&activities.MassUpdates{Client: a.Kube, Offerings: a.Offerings, Temporal: c, Versioned: o.Versioning.Enabled()})
	return w
}
