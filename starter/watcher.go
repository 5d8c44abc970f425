package starter

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/workflows/runs"
)

// WatcherOptions configure the watcher.
type WatcherOptions struct {
	// Catalog is the trust boundary (tenancy): the SFPlans and SFServices
	// of other namespaces that repeat a catalog ID are marked not served,
	// and their SFClusters not used. internal/system sets it.
	Catalog tenancy.Boundary
	// LeaderElection makes one of several watcher replicas the active one.
	LeaderElection bool
	// LeaderElectionNamespace holds the lease; empty means the namespace qm runs in.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election
	// (controller-runtime's defaults, 15 s, 10 s and 2 s, when zero): a
	// standby takes over at most about LeaseDuration after the leader's last
	// renewal.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// HealthAddr serves /healthz and /readyz; empty or "0" turns them off.
	HealthAddr string
	// MetricsAddr serves /metrics: controller-runtime's, client-go's and the
	// Temporal client's; empty or "0" turns it off.
	MetricsAddr string
	// TemporalAddress names the workflow engine in what the watcher records
	// when it cannot start a run.
	TemporalAddress string
	// Concurrency is the number of resources reconciled at once per kind.
	Concurrency int
	// ClusterProbePeriod is how often each SFCluster's cluster is probed
	// (0: DefaultClusterProbePeriod).
	ClusterProbePeriod time.Duration
	// WorkerServiceAccount ("namespace:name") is the identity the workers
	// run as, when it is not the watcher's own (the chart gives each
	// component its own service account): a UsageKind is Permitted when
	// the watcher may list and watch its workloads and this account may
	// get and patch them. Empty: the watcher's identity does all four.
	WorkerServiceAccount string
	// LoopCheckPeriod is how often the watcher looks for long-lived runs
	// that Temporal lost, to start them again from their resources (0:
	// DefaultLoopCheckPeriod).
	LoopCheckPeriod time.Duration
	// TemporalNamespace, when set, is the namespace whose search attributes
	// the leading watcher registers again, at each of those looks, where
	// they are missing (a namespace deleted and registered again has none,
	// and no operation could start).
	TemporalNamespace string
	// Shard is the part of the instances and bindings this watcher owns,
	// on a lease of its own (the whole when zero). The first shard also
	// does the work of every other kind.
	Shard sharding.Shard
	// Namespaces, when set, are the only namespaces the watcher watches
	// (cluster-scoped kinds are watched whole): Quartermasters that share a
	// cluster, each with a Temporal namespace of its own, keep out of each
	// other's way so (the tests run side by side this way). Empty: every
	// namespace.
	Namespaces []string
}

// LeaseName is the Lease through which one of several watchers leads, in
// the namespace WatcherOptions.LeaderElectionNamespace names.
const LeaseName = "qm-watcher.quartermaster.io"

// NewWatcher returns a controller-runtime manager whose reconcilers start
// the workflows of SFServiceInstances and SFServiceBindings, and keep the
// Ready condition of SFServices and SFPlans.
func NewWatcher(cfg *rest.Config, tc client.Client, opts WatcherOptions) (ctrl.Manager, error) {
	healthAddr := opts.HealthAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 16
	}
	if opts.Shard == (sharding.Shard{}) {
		opts.Shard = sharding.Whole
	}
	if err := opts.Shard.Validate(); err != nil {
		return nil, err
	}
	// Where no admission policy sets finalizers, adding them is on every
	// operation's path: no client-side rate limit, as for the worker
	// (crds.NewClient).
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	// The registry Secrets stay out of the cache of Secrets (their
	// metadata, which servicebinding.io and binding usages watch): they are
	// Quartermaster's own, never a binding's, and one comes with every
	// instance and binding, so that watching them cost a watch event per
	// provision and most of the Secrets the cache held at rest.
	notRegistry, err := labels.NewRequirement(registry.Label, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("the selector of Secrets that are not registries: %w", err)
	}
	// Nor the records of what instances applied (drift checks'), for the
	// same reasons.
	notApplied, err := labels.NewRequirement(drift.Label, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("the selector of Secrets that are not records: %w", err)
	}
	secrets := labels.NewSelector().Add(*notRegistry, *notApplied)
	if opts.Shard.Sharded() {
		// Nor the bindings' credentials: a sharded first shard watches
		// those where something reads them (bindingSecrets).
		secrets = secrets.Add(credentialsLabel(selection.DoesNotExist))
	}
	// Without managedFields: nothing here reads them, and they are most of
	// what the caches would hold of the tens of thousands of objects
	// (Secrets among them) the watcher watches.
	cacheOpts := cache.Options{NewInformer: informers.New, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[ctrlclient.Object]cache.ByObject{secretsMetadata(): {Label: secrets}}}
	shardCache(&cacheOpts, opts.Shard)
	cacheOpts.DefaultNamespaces = informers.Namespaces(opts.Namespaces)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  crds.NewScheme(),
		Cache:                   cacheOpts,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        leaseName(opts.Shard),
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// A watcher that stops (a rolling update, a drained node) hands the
		// lease over at once instead of making the next wait out its term.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 nonZero(opts.LeaseDuration),
		RenewDeadline:                 nonZero(opts.RenewDeadline),
		RetryPeriod:                   nonZero(opts.RetryPeriod),
		HealthProbeBindAddress:        healthAddr,
		Metrics:                       metricsserver.Options{BindAddress: cmp.Or(opts.MetricsAddr, "0")},
		// A process may build a second watcher after the first stopped (qm dev
		// restarted in-process, tests); controller names stay unique per manager.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the watcher's manager: %w", err)
	}
	if healthAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	s := &Starter{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), Temporal: tc, TemporalAddress: opts.TemporalAddress, Catalog: opts.Catalog}
	copts := func() controller.Options {
		return controller.Options{MaxConcurrentReconciles: opts.Concurrency, RateLimiter: retryLimiter(),
			NewQueue: newQueue(namespaceTenant)}
	}
	// An instance's or binding's tenant may be an OSB organization, which
	// only the object says.
	instanceTenant := fairness.OfRequest(mgr.GetCache(), func() ctrlclient.Object { return &osbv1alpha1.SFServiceInstance{} }, opts.Catalog.Trusted)
	bindingTenant := fairness.OfRequest(mgr.GetCache(), func() ctrlclient.Object { return &osbv1alpha1.SFServiceBinding{} }, opts.Catalog.Trusted)
	instanceOpts, bindingOpts := copts(), copts()
	instanceOpts.NewQueue, bindingOpts.NewQueue = newQueue(instanceTenant), newQueue(bindingTenant)
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFServiceInstance{}).Named("sfserviceinstance").
		WithOptions(instanceOpts).Complete(reconcile.Func(s.ReconcileInstance)); err != nil {
		return nil, fmt.Errorf("registering the SFServiceInstance reconciler: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFServiceBinding{}).Named("sfservicebinding").
		WithOptions(bindingOpts).Complete(reconcile.Func(s.ReconcileBinding)); err != nil {
		return nil, fmt.Errorf("registering the SFServiceBinding reconciler: %w", err)
	}
	keep := newLoops(tc, opts.LoopCheckPeriod, opts.TemporalNamespace)
	if err := setupCredentialRotations(mgr, tc, copts, keep); err != nil {
		return nil, err
	}
	if err := indexOfferings(mgr); err != nil {
		return nil, fmt.Errorf("indexing the offerings: %w", err)
	}
	if opts.Shard.First() {
		if err := setupFirstShard(mgr, tc, opts, copts, keep); err != nil {
			return nil, err
		}
	} else {
		keep.Namespace = "" // the first shard keeps the search attributes
		if err := setupAutoUpdates(mgr, tc, copts, keep, false); err != nil {
			return nil, err
		}
		if err := setupClusterHolds(mgr, copts); err != nil {
			return nil, err
		}
	}
	s.keepInFlight(keep)
	if err := setupLoops(mgr, keep); err != nil {
		return nil, err
	}
	if err := setupFleetMetrics(mgr, opts.Shard); err != nil {
		return nil, err
	}
	return mgr, nil
}

// setupFirstShard registers the work that no instance's or binding's
// shard decides: the offerings' status, the health and drift checks, the registry
// and the Kubernetes users' kinds, the SFClusters, the automatic mass
// updates, and the labelling of the objects no shard owns yet.
func setupFirstShard(mgr ctrl.Manager, tc client.Client, opts WatcherOptions, copts reconcilerOptions, keep *Loops) error {
	classes, err := classResources(mgr, opts.Shard, opts.Namespaces)
	if err != nil {
		return err
	}
	secrets := newBindingSecrets(mgr, opts.Shard.Sharded())
	for _, setup := range []func() error{
		func() error { return setupOfferingStatus(mgr, opts.Catalog) },
		func() error { return setupHealthChecks(mgr, tc, copts, keep) },
		func() error { return setupDriftChecks(mgr, tc, keep) },
		func() error { return setupServiceClasses(mgr, classes, copts) },
		func() error { return setupCatalogs(mgr, copts) },
		func() error { return setupClaims(mgr, secrets, tc, copts, keep) },
		func() error { return setupBindingUsages(mgr, secrets, tc, copts, opts, keep) },
		func() error { return setupServiceBindings(mgr, secrets, tc, copts, keep) },
		func() error { return setupAutoUpdates(mgr, tc, copts, keep, true) },
		func() error { return setupClusters(mgr, opts.Shard, opts.ClusterProbePeriod, opts.Catalog, copts) },
		func() error { return setupInstanceLimits(mgr, opts.Namespaces, copts) },
	} {
		if err := setup(); err != nil {
			return err
		}
	}
	if opts.Shard.Sharded() {
		return setupStamper(mgr, copts)
	}
	return nil
}

// ReconcileInstance starts Provision, Update or Deprovision for an instance
// that asks for one (lifecycle.Requested).
func (s *Starter) ReconcileInstance(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var inst osbv1alpha1.SFServiceInstance
	if err := s.Client.Get(ctx, req.NamespacedName, &inst); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	op, ok := lifecycle.Requested(&inst)
	switch {
	case !ok && inst.Status.State.Terminal():
		s.settled(&inst)
		return ctrl.Result{}, nil
	case !ok:
		return ctrl.Result{}, nil // a workflow is on it, or the finalizer is gone
	case op == lifecycle.OpDeprovision && inst.DeletionTimestamp == nil:
		return ctrl.Result{}, s.delete(ctx, &inst) // "delete" in the status
	case op != lifecycle.OpDeprovision:
		if err := s.addFinalizer(ctx, &inst, osbv1alpha1.InstanceFinalizer); err != nil {
			return ctrl.Result{}, err
		}
		if op == lifecycle.OpProvision {
			if err := s.protectByDefault(ctx, &inst); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return s.startInstance(ctx, &inst, op)
}

// startInstance starts op's run for the instance.
func (s *Starter) startInstance(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, op lifecycle.Operation) (ctrl.Result, error) {
	attrs := []temporal.SearchAttributeUpdate{
		runs.AttrInstance.ValueSet(inst.OSBID()),
		runs.AttrService.ValueSet(inst.Spec.ServiceID),
		runs.AttrPlan.ValueSet(inst.Spec.PlanID),
	}
	if inst.Spec.ClusterID != "" {
		attrs = append(attrs, runs.AttrCluster.ValueSet(inst.Spec.ClusterID))
	}
	t := lifecycle.InstanceTarget(inst)
	text := s.describeRun(ctx, t, op, inst.Spec.PlanID, inst.Spec.ServiceID, [][2]string{{"instance ID", inst.OSBID()}})
	return s.start(ctx, inst, t, op, attrs, text)
}

// ReconcileBinding starts Bind or Unbind for a binding that asks for one.
func (s *Starter) ReconcileBinding(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b osbv1alpha1.SFServiceBinding
	if err := s.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	op, ok := lifecycle.RequestedBinding(&b)
	switch {
	case !ok && b.Status.State.Terminal():
		s.settled(&b)
		return ctrl.Result{}, nil
	case !ok:
		return ctrl.Result{}, nil
	case op == lifecycle.OpUnbind && b.DeletionTimestamp == nil:
		return ctrl.Result{}, s.delete(ctx, &b)
	case op == lifecycle.OpBind:
		if err := s.addFinalizer(ctx, &b, osbv1alpha1.BindingFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	return s.startBinding(ctx, &b, op)
}

// startBinding starts op's run for the binding.
func (s *Starter) startBinding(ctx context.Context, b *osbv1alpha1.SFServiceBinding, op lifecycle.Operation) (ctrl.Result, error) {
	attrs := []temporal.SearchAttributeUpdate{
		runs.AttrInstance.ValueSet(b.Spec.InstanceID),
		runs.AttrBinding.ValueSet(b.Spec.ID),
		runs.AttrService.ValueSet(b.Spec.ServiceID),
		runs.AttrPlan.ValueSet(b.Spec.PlanID),
	}
	t := lifecycle.BindingTarget(b)
	text := s.describeRun(ctx, t, op, b.Spec.PlanID, b.Spec.ServiceID, [][2]string{{"binding ID", b.Spec.ID}, {"instance ID", b.Spec.InstanceID}})
	return s.start(ctx, b, t, op, attrs, text)
}

// specOrDeletion passes the updates of a resource whose spec changed (its
// generation) or whose deletion began: its own finalizer and status writes
// wake nothing.
var specOrDeletion = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectNew.GetGeneration() != e.ObjectOld.GetGeneration() ||
		e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil
}}

// nonZero is d, or nil for controller-runtime's default.
func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
