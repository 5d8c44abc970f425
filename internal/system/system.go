// Package system wires Quartermaster's components into one process: the
// Temporal worker, the watcher and the OSB/admin API, each optional, sharing
// one offerings cache and one Kubernetes client. It is the one place that
// assembles them: `qm dev`, the single-component commands (`qm worker`,
// `qm watcher`, `qm api`) and the tests all start what they run through it.
package system

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/renderproc"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows/runs"
)

// Options say which components a process runs, and what they reach.
type Options struct {
	// Kube reaches the cluster the components work on.
	Kube *rest.Config
	// Catalog is the trust boundary: the namespaces whose SFServices,
	// SFPlans and SFClusters are the platform's (tenancy). The API's
	// namespace must be one of them.
	Catalog tenancy.Boundary
	// TemplateHosts, when set, are the only hosts the worker fetches
	// templates from (plan.Fetcher.AllowedHosts).
	TemplateHosts []string
	// RenderBounds limit each render of a template (zero: plan.DefaultBounds).
	RenderBounds plan.Bounds
	// RenderProcesses is the most render processes the worker runs at once
	// (0: renderproc.DefaultSizePerCPU per CPU): each render runs in one,
	// which is stopped when it passes RenderBounds (internal/renderproc).
	RenderProcesses int
	// Renderer, when set, renders instead of a pool of the worker's own:
	// the tests share one pool between their many workers, since a test
	// binary built with the race detector takes over a second to start as
	// a render process.
	Renderer plan.Runner
	// Temporal is a client of the Temporal frontend, for the worker and the
	// watcher, and for the API's mass updates (the API runs without it).
	Temporal client.Client
	// TemporalNamespace, when set, has the worker register the search
	// attributes the workflows set, where they are missing.
	TemporalNamespace string
	// HealthCheckMinute is how long a minute of the registered services'
	// health checks lasts: time.Minute unless set, shorter in tests and
	// demos.
	HealthCheckMinute time.Duration
	// Scheduler chooses the cluster of each new instance among the
	// SFClusters ("" or default: the one Kube reaches).
	Scheduler scheduling.Scheduler
	// Namespaces, when set, are the only namespaces whose resources the
	// components watch: the watcher's (unless its options name others),
	// the health checks' services and the scheduler's instances. Two
	// Quartermasters on one cluster, each with a Temporal namespace of its
	// own, then keep to their own resources. Empty: every namespace.
	Namespaces []string

	// Worker runs the Temporal worker.
	Worker bool
	// WorkerStopTimeout bounds how long a stopping worker lets its tasks
	// in hand finish (zero: worker.DefaultStopTimeout).
	WorkerStopTimeout time.Duration
	// WorkerDeadlockTimeout is how long workflow code may run without
	// yielding (zero: the SDK's 1 s; worker.Options.DeadlockTimeout).
	WorkerDeadlockTimeout time.Duration
	// WorkerVersioning puts the worker in a version of the worker
	// deployment (zero: unversioned). A versioned worker promotes its build
	// before it is ready, and on stopping serves the runs pinned to a build
	// no longer routed to before the components stop.
	WorkerVersioning worker.Versioning
	// Watcher, when set, runs the watcher with these options.
	Watcher *starter.WatcherOptions
	// API, when set, serves the OSB and admin API and its metrics on
	// APIListeners. Its Kube and Offerings are filled in.
	API          *api.Server
	APIListeners api.Listeners
	// Probes, when set, serves this process's /healthz, /readyz and
	// /metrics (the worker's; the watcher and the API serve their own).
	Probes *telemetry.Server
}

// System is a set of running components.
type System struct {
	// Kube is the shared, uncached client: the worker's activities and the
	// API read and write through it.
	Kube ctrlclient.Client
	// Offerings is the shared cache of SFServices and SFPlans, synced.
	Offerings *offerings.Cache

	cancel context.CancelFunc
	group  *errgroup.Group
}

// Start starts the chosen components and returns once the offerings cache
// has synced and the worker polls. They run until ctx is done, Stop is
// called, or one of them fails.
func Start(ctx context.Context, o Options) (*System, error) {
	if (o.Worker || o.Watcher != nil) && o.Temporal == nil {
		return nil, errors.New("the worker and the watcher need a Temporal client")
	}
	kube, err := crds.NewClient(o.Kube)
	if err != nil {
		return nil, err
	}
	stopping := ctx
	ctx, cancel := drainFirst(ctx, o)
	g, gctx := errgroup.WithContext(ctx)
	s := &System{Kube: kube, cancel: cancel, group: g}
	if err := s.start(gctx, stopping, g, o); err != nil {
		cancel()
		_ = g.Wait()
		return nil, err
	}
	return s, nil
}

// Run starts the chosen components and runs them until ctx is done or one
// of them fails.
func Run(ctx context.Context, o Options) error {
	s, err := Start(ctx, o)
	if err != nil {
		return err
	}
	return s.Wait()
}

// start starts the components under ctx; stopping is done once the
// process is told to stop (a versioned worker then drains, and no longer
// takes the routing over).
func (s *System) start(ctx, stopping context.Context, g *errgroup.Group, o Options) error {
	if o.Worker || o.API != nil {
		// The API alone reads the catalog of its namespace only, which is
		// all its role may read; the worker reads every namespace's plans,
		// the tenants' too.
		namespace, boundary := "", o.Catalog
		if !o.Worker {
			namespace, boundary = o.API.Namespace, tenancy.Boundary{Catalog: []string{o.API.Namespace}}
		}
		if o.API != nil && !boundary.Trusted(o.API.Namespace) {
			return fmt.Errorf("the API's namespace %s is not a catalog namespace (%s): OSB requests would use plans the catalog does not serve", o.API.Namespace, boundary)
		}
		cache, err := offerings.New(o.Kube, crds.NewScheme(), namespace, boundary)
		if err != nil {
			return err
		}
		if err := cache.Start(ctx); err != nil {
			return err
		}
		s.Offerings = cache
	}
	if o.Worker {
		if o.TemporalNamespace != "" {
			if err := runs.EnsureSearchAttributes(ctx, o.Temporal, o.TemporalNamespace); err != nil {
				return err
			}
		}
		checks, claims, err := registeredServiceActivities(ctx, g, o.Kube, s.Kube, o.HealthCheckMinute, o.Namespaces)
		if err != nil {
			return err
		}
		// The scheduler counts the instances of every cluster for each
		// decision; each drift-check pass lists its shard's instances, and
		// their bindings.
		instances, err := startCache(ctx, g, o.Kube, o.Namespaces, "the scheduler and the drift checks",
			&osbv1alpha1.SFServiceInstance{}, &osbv1alpha1.SFServiceBinding{})
		if err != nil {
			return err
		}
		renderer := o.Renderer
		if renderer == nil {
			pool := &renderproc.Pool{Size: o.RenderProcesses}
			context.AfterFunc(ctx, pool.Stop) // the worker's end, however it comes
			renderer = pool
		}
		w := worker.New(o.Temporal, worker.Activities{Kube: s.Kube, Offerings: s.Offerings,
			Templates: &plan.Fetcher{AllowedHosts: o.TemplateHosts}, Bounds: o.RenderBounds, Renderer: renderer, HealthChecks: checks, Claims: claims,
			Clusters: s.clusters(o.Kube, o.Catalog), Catalog: o.Catalog,
			Scheduler: o.Scheduler, Instances: instances, Events: checks.Events},
			worker.Options{StopTimeout: o.WorkerStopTimeout, Versioning: o.WorkerVersioning, DeadlockTimeout: o.WorkerDeadlockTimeout})
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting the Temporal worker: %w", err)
		}
		if o.WorkerVersioning.Enabled() {
			pctx, done := context.WithTimeout(ctx, promoteTimeout)
			err := worker.Promote(pctx, o.Temporal, o.WorkerVersioning, slog.Default())
			done()
			if err != nil {
				w.Stop()
				return err
			}
			actx, stop := context.WithCancel(ctx)
			context.AfterFunc(stopping, stop)
			g.Go(func() error {
				worker.Adopt(actx, o.Temporal, o.WorkerVersioning, slog.Default())
				return nil
			})
		}
		g.Go(func() error { return runWorker(ctx, w) })
	}
	if o.Watcher != nil {
		wo := *o.Watcher
		wo.Catalog = o.Catalog
		if len(wo.Namespaces) == 0 {
			wo.Namespaces = o.Namespaces
		}
		mgr, err := starter.NewWatcher(o.Kube, o.Temporal, wo)
		if err != nil {
			return err
		}
		g.Go(func() error { return mgr.Start(ctx) })
	}
	if o.Probes != nil {
		g.Go(func() error { return o.Probes.Run(ctx) })
	}
	if o.API != nil {
		if o.APIListeners.OSB == nil {
			return errors.New("the API needs a listener")
		}
		// The last_operation polls read the cache.
		polls, err := startCache(ctx, g, o.Kube, []string{o.API.Namespace}, "the API", &osbv1alpha1.SFServiceInstance{}, &osbv1alpha1.SFServiceBinding{})
		if err != nil {
			return err
		}
		o.API.Kube, o.API.Offerings, o.API.Cache = s.Kube, s.Offerings, polls
		o.API.Clusters = s.clusters(o.Kube, tenancy.Boundary{Catalog: []string{o.API.Namespace}})
		if o.API.Temporal == nil {
			o.API.Temporal = o.Temporal
		}
		g.Go(func() error { return o.API.Serve(ctx, o.APIListeners) })
	}
	return nil
}

// startCache starts an informer cache of objs in namespaces (all, when
// there are none), without their managedFields, for user, and returns once
// it has synced.
func startCache(ctx context.Context, g *errgroup.Group, cfg *rest.Config, namespaces []string, user string, objs ...ctrlclient.Object) (cache.Cache, error) {
	opts := cache.Options{Scheme: crds.NewScheme(), DefaultTransform: cache.TransformStripManagedFields(), NewInformer: informers.New,
		DefaultNamespaces: informers.Namespaces(namespaces)}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the cache of %s: %w", user, err)
	}
	for _, obj := range objs {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T for %s: %w", obj, user, err)
		}
	}
	g.Go(func() error { return c.Start(ctx) })
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache of %s did not sync", user)
	}
	return c, nil
}

// promoteTimeout bounds a starting worker's wait for Temporal to know its
// build; Temporal registers a version at its first poll.
const promoteTimeout = time.Minute

// drainFirst returns the context the components run under: cancelled by
// Stop at once, and when ctx is done only after a versioned worker has
// drained (worker.Drain), so that the caches its activities read stay up
// while it serves its pinned runs.
func drainFirst(ctx context.Context, o Options) (context.Context, context.CancelFunc) {
	if !o.Worker || !o.WorkerVersioning.Enabled() {
		return context.WithCancel(ctx)
	}
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			worker.Drain(run, o.Temporal, o.WorkerVersioning, slog.Default())
			cancel()
		case <-run.Done():
		}
	}()
	return run, cancel
}

// runWorker stops the worker when ctx is done.
func runWorker(ctx context.Context, w sdkworker.Worker) error {
	<-ctx.Done()
	w.Stop()
	return nil
}

// Wait waits until the components stop: when the context Start was given is
// done, Stop is called, or one of them fails (then the others stop too). It
// returns the first failure.
func (s *System) Wait() error {
	err := s.group.Wait()
	s.cancel()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Stop stops every component and waits for them.
func (s *System) Stop() error {
	s.cancel()
	return s.Wait()
}

// clusters reaches the clusters registered as SFClusters, and the one cfg
// reaches as cluster "1".
func (s *System) clusters(cfg *rest.Config, catalog tenancy.Boundary) *clusters.Clients {
	return &clusters.Clients{Local: s.Kube, LocalConfig: cfg, Reader: s.Kube, Scheme: s.Kube.Scheme(), Catalog: &catalog}
}
