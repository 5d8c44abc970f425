package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/tenancy"
)

// target is an instance or binding, loaded with what its templates need.
type target struct {
	lifecycle.Target
	instance *osbv1alpha1.SFServiceInstance // nil when unbinding from an instance already gone
	binding  *osbv1alpha1.SFServiceBinding  // nil for instance operations
	plan     *osbv1alpha1.SFPlan
	service  *osbv1alpha1.SFService
	applied  bool   // the registry is known to exist
	observed string // what the status template said of the operation under way, before it was marked in progress
	// renderedPlan is the generation of the plan this run rendered (0:
	// not known to this worker).
	renderedPlan int64
	// registrySecret is the registry Secret as this run's apply left it,
	// for the observation that follows (readRegistry), which takes it.
	registrySecret *corev1.Secret
	// written is what this run's apply just wrote, as the API server
	// answered each write, for the observation that follows: the sources
	// among it need no read of their own (readSources). Once only, as
	// registrySecret; shared between copies and never changed.
	written map[apply.Ref]map[string]any
	// kube reaches the cluster the instance is scheduled on: what its
	// templates apply, its registry and its bindings' credentials live
	// there. remote says it is not the cluster Quartermaster runs in.
	kube   client.Client
	remote bool
	// cluster is the SFCluster of a remote cluster, as reach read it, and
	// reached the cluster as reach found it.
	cluster *resourcev1alpha1.SFCluster
	reached clusters.Cluster
	// applier applies, reads and deletes what the templates render: kube,
	// or a client of the same cluster acting as the plan's ServiceAccount
	// (actAs), for a tenant's plan and a catalog plan that names one.
	applier client.Client
	// refused is why the cluster the instance names may not be used (an
	// SFCluster outside the catalog, an unsafe kubeconfig): every step
	// fails with it, but the target's own status can still be written.
	refused error
}

func (t *target) object() client.Object {
	if t.binding != nil {
		return t.binding
	}
	return t.instance
}

// status returns the state, observed generation and description of the
// target's status.
func (t *target) status() (osbv1alpha1.OperationState, int64, string) {
	if t.binding != nil {
		return t.binding.Status.State, t.binding.Status.ObservedGeneration, t.binding.Status.Description
	}
	return t.instance.Status.State, t.instance.Status.ObservedGeneration, t.instance.Status.Description
}

// carriedOut is the generation the status says an operation ended on
// (succeeded or failed), or 0 while none has: for an operation that is
// done, the target's current generation.
func (t *target) carriedOut() int64 {
	if state, observed, _ := t.status(); state.Terminal() {
		return observed
	}
	return 0
}

// resources returns what the target's templates applied so far.
func (t *target) resources() []osbv1alpha1.Source {
	if t.binding != nil {
		return t.binding.Status.Resources
	}
	return t.instance.Status.Resources
}

// planID is the plan the target's templates come from.
func (t *target) planID() string {
	if t.binding != nil {
		return t.binding.Spec.PlanID
	}
	return t.instance.Spec.PlanID
}

// done reports whether op already ran to its end for the target's current
// generation; an update, also for its plan's generation (a mass update
// starts it for a changed plan, the instance unchanged).
func (t *target) done(op lifecycle.Operation) bool {
	state, observed, _ := t.status()
	if op == lifecycle.OpUpdate && !massupdate.Current(t.instance, t.plan.Generation) {
		return false
	}
	return lifecycle.Done(op, state, observed, t.object().GetGeneration())
}

// load reads the target, its instance, plan and service.
func (a *Operations) load(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) (*target, error) {
	t, err := a.loadObjects(ctx, tg, op)
	if err != nil {
		return nil, err
	}
	if t.refused != nil {
		return nil, t.refused
	}
	id := t.planID()
	if t.plan, err = a.Offerings.PlanFor(ctx, id, tg.Namespace); err != nil {
		if errors.Is(err, offerings.ErrNotFound) {
			return nil, unknownPlan(id)
		}
		return nil, err
	}
	if t.service, err = a.Offerings.ServiceFor(ctx, t.plan.Spec.ServiceID, tg.Namespace); err != nil {
		if errors.Is(err, offerings.ErrNotFound) {
			return nil, planError("plan %q belongs to service %q, which no SFService has as spec.id", id, t.plan.Spec.ServiceID)
		}
		return nil, err
	}
	if err := a.actAs(t); err != nil {
		return nil, err
	}
	return t, nil
}

// actAs sets who applies the target's templates: the worker itself for a
// catalog plan, a ServiceAccount of the plan's namespace for a tenant's
// plan or one that names it (tenancy.Boundary.ActsAs).
func (a *Operations) actAs(t *target) error {
	t.applier = t.kube
	id, ok := a.Catalog.ActsAs(t.plan.Namespace, t.plan.Spec.ServiceAccountName)
	if !ok {
		return nil
	}
	if a.Clusters == nil {
		return planError("plan %s/%s acts as ServiceAccount %s, and this worker has no configuration to impersonate it with", t.plan.Namespace, t.plan.Name, id)
	}
	cluster := t.reached
	if cluster.Config == nil {
		cluster = clusters.Cluster{Name: resourcev1alpha1.LocalCluster, Config: a.Clusters.LocalConfig}
	}
	c, err := a.Clusters.As(cluster, id)
	if err != nil {
		return err
	}
	t.applier = c
	return nil
}

// tenant says whether the target's plan is a tenant's: one outside the
// catalog namespaces, whose objects stay in its instance's namespace.
func (a *Operations) tenant(t *target) bool {
	return !a.Catalog.Trusted(t.plan.Namespace)
}

// loadObjects reads the target and its instance, without the offerings:
// what writing a status needs, even for an instance whose plan is unknown.
func (a *Operations) loadObjects(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) (*target, error) {
	// A provision's copy from before its scheduling step has no cluster
	// yet: the step wrote one since.
	if t := a.recalled(ctx, tg); t != nil && !(a.Schedules && t.instance != nil && t.instance.Spec.ClusterID == "") {
		return t, nil
	}
	t := &target{Target: tg}
	key := client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}
	instKey := key
	if tg.Kind == lifecycle.KindBinding {
		t.binding = &osbv1alpha1.SFServiceBinding{}
		if err := a.Client.Get(ctx, key, t.binding); err != nil {
			return nil, gone(err, tg)
		}
		instKey.Name = t.binding.Spec.InstanceID
	}
	t.instance = &osbv1alpha1.SFServiceInstance{}
	err := a.Client.Get(ctx, instKey, t.instance)
	switch {
	case err == nil:
	case tg.Kind == lifecycle.KindBinding && apierrors.IsNotFound(err) && op == lifecycle.OpUnbind:
		t.instance = nil // unbinding from an instance already gone
	case tg.Kind == lifecycle.KindBinding && apierrors.IsNotFound(err):
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("instance %s/%s of the binding does not exist", instKey.Namespace, instKey.Name), ErrGone, err)
	default:
		return nil, gone(err, tg)
	}
	if err := a.reach(ctx, t); err != nil {
		if _, permanent := Permanent(err); !permanent {
			return nil, err
		}
		t.refused = err // not kept for the run: each step meets it again
		return t, nil
	}
	a.remember(ctx, t)
	return t, nil
}

// clusterName is the name of the SFCluster the target's instance is
// scheduled on: "1", the cluster Quartermaster runs in, unless scheduled
// elsewhere.
func (t *target) clusterName() string {
	if t.instance == nil || clusters.IsLocal(t.instance.Spec.ClusterID) {
		return resourcev1alpha1.LocalCluster
	}
	return t.instance.Spec.ClusterID
}

// reach finds the client of the cluster the target's instance is
// scheduled on. An unbind whose instance is gone works in the cluster its
// binding's status recorded.
func (a *Operations) reach(ctx context.Context, t *target) error {
	t.kube = a.Client
	var cluster, of string
	switch {
	case t.instance != nil:
		cluster, of = t.instance.Spec.ClusterID, "instance "+t.instance.Name
	case t.binding != nil: // unbinding from an instance already gone
		cluster, of = t.binding.Status.ClusterID, "binding "+t.binding.Name
	}
	if a.Clusters == nil || clusters.IsLocal(cluster) {
		return nil
	}
	c, err := a.Clusters.Get(ctx, t.Namespace, cluster)
	var untrusted *clusters.Untrusted
	var unsafe *tenancy.UnsafeKubeconfig
	switch {
	case errors.As(err, &untrusted) || errors.As(err, &unsafe):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("reaching the cluster %s of %s: %v", cluster, of, err), ErrPlan, nil)
	case err != nil:
		return fmt.Errorf("reaching the cluster %s of %s: %w", cluster, of, err)
	}
	t.kube, t.remote, t.cluster, t.reached = c.Client, true, c.SFCluster, c
	return nil
}

// sfCluster is the SFCluster the target's instance is scheduled on, as its
// templates see it (.cluster): the one reach read, or the name alone of
// the cluster Quartermaster runs in.
func (t *target) sfCluster() *resourcev1alpha1.SFCluster {
	if t.cluster != nil {
		return t.cluster
	}
	return &resourcev1alpha1.SFCluster{ObjectMeta: metav1.ObjectMeta{Name: t.clusterName()}}
}

// The objects a workflow run has read or written are kept for the run's
// next steps, which then need no read of their own: the run works on the
// generation it began with. A worker that restarts reads them again.
const (
	runCacheSize = 10000
	runCacheTTL  = 10 * time.Minute
)

// runCache holds the targets of the runs under way, by runKey.
type runCache struct {
	once  sync.Once
	cache *utilcache.LRUExpireCache
}

func (c *runCache) get() *utilcache.LRUExpireCache {
	c.once.Do(func() { c.cache = utilcache.NewLRUExpireCache(runCacheSize) })
	return c.cache
}

// runKey identifies the target within the current workflow run; it is empty
// outside an activity.
func runKey(ctx context.Context, tg lifecycle.Target) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	return activity.GetInfo(ctx).WorkflowExecution.RunID + "/" + string(tg.Kind) + "/" + tg.Namespace + "/" + tg.Name
}

// copyObjects copies the target's objects, and only those: the
// offerings cache serves the plan and service again each time.
func (t *target) copyObjects() *target {
	// The SFCluster is read only, as the clients' cache that reach took
	// it from keeps it: shared, not copied.
	c := &target{Target: t.Target, observed: t.observed, renderedPlan: t.renderedPlan, kube: t.kube, remote: t.remote, cluster: t.cluster, reached: t.reached}
	if t.instance != nil {
		c.instance = t.instance.DeepCopy()
	}
	if t.binding != nil {
		c.binding = t.binding.DeepCopy()
	}
	if t.registrySecret != nil {
		c.registrySecret = t.registrySecret.DeepCopy()
	}
	c.written = t.written
	return c
}

// remember keeps copies of the target's objects for the run's next steps.
func (a *Operations) remember(ctx context.Context, t *target) {
	if key := runKey(ctx, t.Target); key != "" {
		a.runs.get().Add(key, t.copyObjects(), runCacheTTL)
	}
}

func (a *Operations) recalled(ctx context.Context, tg lifecycle.Target) *target {
	key := runKey(ctx, tg)
	if key == "" {
		return nil
	}
	v, ok := a.runs.get().Get(key)
	if !ok {
		return nil
	}
	return v.(*target).copyObjects()
}

// recallInstance is a copy of the instance the run's earlier steps read,
// or nil (for Scheduling).
func (a *Operations) recallInstance(ctx context.Context, tg lifecycle.Target) *osbv1alpha1.SFServiceInstance {
	if t := a.recalled(ctx, tg); t != nil && t.binding == nil {
		return t.instance
	}
	return nil
}

// rememberInstance keeps the instance as the scheduling step wrote it for
// the run's next steps, with the cluster it is now scheduled on.
// A cluster it cannot reach yet leaves nothing kept: the next step reads
// the instance and reaches the cluster itself.
func (a *Operations) rememberInstance(ctx context.Context, tg lifecycle.Target, inst *osbv1alpha1.SFServiceInstance) {
	t := &target{Target: tg, instance: inst}
	if before := a.recalled(ctx, tg); before != nil {
		t.observed, t.renderedPlan = before.observed, before.renderedPlan
	}
	if err := a.reach(ctx, t); err != nil {
		a.forget(ctx, tg)
		return
	}
	a.remember(ctx, t)
}

// forget drops the run's copies once its outcome is written.
func (a *Operations) forget(ctx context.Context, tg lifecycle.Target) {
	if key := runKey(ctx, tg); key != "" {
		a.runs.get().Remove(key)
	}
}

// ensureNamespace creates the target's namespace in the cluster it is
// scheduled on, before the provision puts its registry and objects there:
// a sister cluster has Quartermaster's namespaces only as it needs them.
func (t *target) ensureNamespace(ctx context.Context, op lifecycle.Operation) error {
	if !t.remote || op != lifecycle.OpProvision {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.Namespace}}
	if err := t.kube.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s in cluster %s: %w", t.Namespace, t.clusterName(), err)
	}
	return nil
}
