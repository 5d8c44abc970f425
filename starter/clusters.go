package starter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/tenancy"
)

// DefaultClusterProbePeriod is how often each SFCluster's cluster is
// probed when nothing else brings it up sooner.
const DefaultClusterProbePeriod = 30 * time.Second

// instanceSettle is how long after an instance came to a cluster, or left
// it, the cluster is probed again.
const instanceSettle = time.Second

// ClusterFinalizer holds an SFCluster while instances are scheduled on it:
// deleting it would strand them.
const ClusterFinalizer = "quartermaster.io/instances-scheduled"

// ClusterHoldOwner is the field manager of the finalizer that an
// instance's shard (not the first) puts on its SFCluster, so that its
// managed fields say who held it.
const ClusterHoldOwner = "qm-watcher-cluster-hold"

// clusterIDField indexes instances by the cluster they are scheduled on.
const clusterIDField = "spec.clusterId"

// ClusterRegistry keeps the status of every SFCluster: whether its
// cluster answers (the Ready condition and its Kubernetes version), its
// capacity and its pods' requests, and the instances scheduled there; and
// holds an SFCluster that still has instances.
type ClusterRegistry struct {
	// Client reads SFClusters from the cache and writes them.
	Client ctrlclient.Client
	// Instances counts the instances scheduled on a cluster.
	Instances instanceCounter
	Clients   *clusters.Clients
	// Period is how often a cluster is probed (0: DefaultClusterProbePeriod).
	Period time.Duration
}

// instanceCounter counts the instances scheduled on a cluster.
type instanceCounter func(ctx context.Context, namespace, cluster string) (int, error)

// setupClusters registers the SFCluster reconciler. A whole watcher counts
// a cluster's instances in its cache, which holds them all; a sharded
// first shard, which caches its own buckets' only, counts them on the API
// server (liveCount).
func setupClusters(mgr ctrl.Manager, shard sharding.Shard, period time.Duration, catalog tenancy.Boundary, copts reconcilerOptions) error {
	count := liveCount(mgr.GetAPIReader())
	if !shard.Sharded() {
		err := mgr.GetFieldIndexer().IndexField(context.Background(), &osbv1alpha1.SFServiceInstance{}, clusterIDField, func(o ctrlclient.Object) []string {
			if id := o.(*osbv1alpha1.SFServiceInstance).Spec.ClusterID; id != "" {
				return []string{id}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("indexing instances by cluster: %w", err)
		}
		count = cachedCount(mgr.GetCache())
	}
	// The prober lists nodes and pods of the cluster it runs in through a
	// client without a cache: a cache would hold every pod.
	local, err := ctrlclient.New(mgr.GetConfig(), ctrlclient.Options{Scheme: crds.NewScheme()})
	if err != nil {
		return err
	}
	r := &ClusterRegistry{Client: mgr.GetClient(), Instances: count, Period: period, Clients: &clusters.Clients{
		Local: local, LocalConfig: mgr.GetConfig(), Reader: mgr.GetAPIReader(), Scheme: crds.NewScheme(), Catalog: &catalog}}
	// An instance that comes to a cluster or leaves it changes the
	// cluster's count: the cluster is probed again a moment later, once
	// for a burst of instances rather than once for each. (A sharded first
	// shard sees its own buckets' instances come and go; the others' are
	// counted at the next probe.)
	probeLater := func(o ctrlclient.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if req, ok := clusterOf(o); ok {
			q.AddAfter(req, instanceSettle)
		}
	}
	scheduledOn := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			probeLater(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, after := e.ObjectOld.(*osbv1alpha1.SFServiceInstance), e.ObjectNew.(*osbv1alpha1.SFServiceInstance)
			if before.Spec.ClusterID != after.Spec.ClusterID {
				probeLater(e.ObjectOld, q)
				probeLater(e.ObjectNew, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			probeLater(e.Object, q)
		},
	}
	// Not on a change of the status alone: every probe writes probedAt,
	// and its own write would wake the next probe at once, a probe and a
	// write a second for as long as a loaded watcher crossed a second
	// between the two. The period, the SFCluster's spec, labels,
	// annotations and deletion (which raises the generation) wake it.
	notStatusAlone := predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})
	err = ctrl.NewControllerManagedBy(mgr).For(&resourcev1alpha1.SFCluster{}, builder.WithPredicates(notStatusAlone)).Named("sfcluster").
		WatchesRawSource(source.Kind[ctrlclient.Object](mgr.GetCache(), &osbv1alpha1.SFServiceInstance{}, scheduledOn)).
		WithOptions(copts()).Complete(reconcile.Func(r.Reconcile))
	if err != nil {
		return fmt.Errorf("registering the SFCluster reconciler: %w", err)
	}
	return nil
}

// Reconcile probes one SFCluster's cluster and writes what it found.
func (r *ClusterRegistry) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sfc resourcev1alpha1.SFCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &sfc); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	instances, err := r.Instances(ctx, sfc.Namespace, sfc.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if done, err := r.holdWhileUsed(ctx, &sfc, instances); done || err != nil {
		return ctrl.Result{}, err
	}

	base := sfc.DeepCopy()
	sfc.Status.ServiceInstanceCount = int64(instances)
	sfc.Status.ObservedGeneration = sfc.Generation
	ready := metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reachable", ObservedGeneration: sfc.Generation}
	probe, err := r.probe(ctx, &sfc)
	if err != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, probe.reason, err.Error()
		sfc.Status.State = resourcev1alpha1.ClusterUnreachable
	} else {
		ready.Message = fmt.Sprintf("Kubernetes %s, %d schedulable nodes", probe.version, probe.nodes)
		sfc.Status.State = resourcev1alpha1.ClusterReady
		sfc.Status.KubernetesVersion = probe.version
		sfc.Status.Allocatable = probe.allocatable
		sfc.Status.Requests = probe.requests
		sfc.Status.ProbedAt = metav1.Now()
		sfc.Status.CurrentCapacity = probe.allocatable.DeepCopy()
		sfc.Status.TotalCapacity = probe.allocatable.DeepCopy()
		maps.Copy(sfc.Status.TotalCapacity, sfc.Spec.TotalCapacity)
	}
	if sfc.DeletionTimestamp != nil {
		ready.Message += fmt.Sprintf("; deleted, held until its %d instances are deprovisioned", instances)
	}
	meta.SetStatusCondition(&sfc.Status.Conditions, ready)
	if !equality.Semantic.DeepEqual(base.Status, sfc.Status) {
		// An update, not a merge patch: a patch leaves out the zero count
		// of a new SFCluster, and kubectl would show nothing for it.
		err := r.Client.Status().Update(ctx, &sfc)
		if apierrors.IsConflict(err) { // read again from a cache that caught up
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the status of SFCluster %s: %w", sfc.Name, err)
		}
	}
	return ctrl.Result{RequeueAfter: r.period()}, nil
}

// cachedCount counts in a cache whose instances are indexed by
// clusterIDField.
func cachedCount(c ctrlclient.Reader) instanceCounter {
	return func(ctx context.Context, namespace, cluster string) (int, error) {
		var insts osbv1alpha1.SFServiceInstanceList
		if err := c.List(ctx, &insts, ctrlclient.InNamespace(namespace), ctrlclient.MatchingFields{clusterIDField: cluster}); err != nil {
			return 0, fmt.Errorf("counting the instances on cluster %s: %w", cluster, err)
		}
		return len(insts.Items), nil
	}
}

// liveCount counts on the API server, which selects the instances by
// their selectable field spec.clusterId: their metadata only, a page at a
// time.
func liveCount(api ctrlclient.Reader) instanceCounter {
	return func(ctx context.Context, namespace, cluster string) (int, error) {
		n, next := 0, ""
		for {
			page := &metav1.PartialObjectMetadataList{}
			page.SetGroupVersionKind(osbv1alpha1.GroupVersion.WithKind("SFServiceInstanceList"))
			err := api.List(ctx, page, ctrlclient.InNamespace(namespace), ctrlclient.MatchingFields{clusterIDField: cluster},
				ctrlclient.Limit(countPage), ctrlclient.Continue(next))
			if err != nil {
				return 0, fmt.Errorf("counting the instances on cluster %s: %w", cluster, err)
			}
			n += len(page.Items)
			if next = page.Continue; next == "" {
				return n, nil
			}
		}
	}
}

// countPage is how many instances' metadata one page of liveCount holds.
const countPage = 1000

func (r *ClusterRegistry) period() time.Duration {
	if r.Period > 0 {
		return r.Period
	}
	return DefaultClusterProbePeriod
}

// holdWhileUsed keeps the finalizer on an SFCluster exactly while
// instances are scheduled on it. It reports done when the SFCluster was
// released for deletion.
func (r *ClusterRegistry) holdWhileUsed(ctx context.Context, sfc *resourcev1alpha1.SFCluster, instances int) (bool, error) {
	has := controllerutil.ContainsFinalizer(sfc, ClusterFinalizer)
	switch {
	case instances > 0 && !has && sfc.DeletionTimestamp == nil:
		return false, patchHold(ctx, r.Client, sfc, true)
	case instances == 0 && has:
		err := patchHold(ctx, r.Client, sfc, false)
		return sfc.DeletionTimestamp != nil, ctrlclient.IgnoreNotFound(err)
	}
	return false, nil
}

// patchHold puts an SFCluster's finalizer on (hold) or takes it off, with
// an optimistic lock: the first shard takes it off and another shard may
// put it on at the same time.
func patchHold(ctx context.Context, c ctrlclient.Client, sfc *resourcev1alpha1.SFCluster, hold bool, opts ...ctrlclient.PatchOption) error {
	base := sfc.DeepCopy()
	if hold {
		controllerutil.AddFinalizer(sfc, ClusterFinalizer)
	} else {
		controllerutil.RemoveFinalizer(sfc, ClusterFinalizer)
	}
	return c.Patch(ctx, sfc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}), opts...)
}

// probed is what a probe found.
type probed struct {
	reason                string // why it failed
	version               string
	nodes                 int
	allocatable, requests corev1.ResourceList
}

// probe reaches the cluster: its version, its nodes' allocatable and its
// pods' requests.
func (r *ClusterRegistry) probe(ctx context.Context, sfc *resourcev1alpha1.SFCluster) (probed, error) {
	cl, err := r.Clients.ForSFCluster(ctx, sfc)
	var untrusted *clusters.Untrusted
	var unsafe *tenancy.UnsafeKubeconfig
	switch {
	case errors.As(err, &untrusted):
		return probed{reason: "NotInCatalog"}, err
	case errors.As(err, &unsafe):
		return probed{reason: "UnsafeKubeconfig"}, err
	case err != nil:
		return probed{reason: "Misconfigured"}, err
	}
	var dc *discovery.DiscoveryClient
	if cl.HTTP != nil { // the cached client's connections
		dc, err = discovery.NewDiscoveryClientForConfigAndClient(cl.Config, cl.HTTP)
	} else {
		dc, err = discovery.NewDiscoveryClientForConfig(cl.Config)
	}
	if err != nil {
		return probed{reason: "Misconfigured"}, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return probed{reason: reasonOf(err)}, fmt.Errorf("reaching the cluster: %w", err)
	}
	var nodes corev1.NodeList
	if err := cl.Client.List(ctx, &nodes); err != nil {
		return probed{reason: reasonOf(err)}, fmt.Errorf("listing the cluster's nodes: %w", err)
	}
	var pods corev1.PodList
	running := fields.AndSelectors(fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))
	if err := cl.Client.List(ctx, &pods, ctrlclient.MatchingFieldsSelector{Selector: running}); err != nil {
		return probed{reason: reasonOf(err)}, fmt.Errorf("listing the cluster's pods: %w", err)
	}
	schedulable := 0
	for _, n := range nodes.Items {
		if !n.Spec.Unschedulable {
			schedulable++
		}
	}
	return probed{version: v.GitVersion, nodes: schedulable,
		allocatable: scheduling.Allocatable(nodes.Items), requests: scheduling.PodRequests(pods.Items)}, nil
}

// reasonOf names what kept a probe from its answer.
func reasonOf(err error) string {
	switch {
	case apierrors.IsUnauthorized(err):
		return "Unauthorized"
	case apierrors.IsForbidden(err):
		return "Forbidden"
	default:
		return "Unreachable"
	}
}

// setupClusterHolds has a shard other than the first hold an SFCluster
// (its finalizer) as soon as one of the shard's instances is scheduled
// there. The first shard keeps the finalizer, but it counts the other
// shards' instances only at its next probe: until then a deletion of a
// cluster that just got its first instance would not wait for it. The
// first shard still takes the finalizer off once no instance is left.
func setupClusterHolds(mgr ctrl.Manager, copts reconcilerOptions) error {
	c := mgr.GetClient()
	scheduled := handler.TypedFuncs[ctrlclient.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			holdFor(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.(*osbv1alpha1.SFServiceInstance).Spec.ClusterID != e.ObjectNew.(*osbv1alpha1.SFServiceInstance).Spec.ClusterID {
				holdFor(e.ObjectNew, q)
			}
		},
	}
	hold := func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		var sfc resourcev1alpha1.SFCluster
		if err := c.Get(ctx, req.NamespacedName, &sfc); err != nil {
			return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
		}
		if sfc.DeletionTimestamp != nil || controllerutil.ContainsFinalizer(&sfc, ClusterFinalizer) {
			return ctrl.Result{}, nil
		}
		err := patchHold(ctx, c, &sfc, true, ctrlclient.FieldOwner(ClusterHoldOwner))
		if apierrors.IsConflict(err) { // read again from a cache that caught up
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if err != nil {
			return ctrl.Result{}, ctrlclient.IgnoreNotFound(fmt.Errorf("holding SFCluster %s for its instances: %w", req.NamespacedName, err))
		}
		return ctrl.Result{}, nil
	}
	err := ctrl.NewControllerManagedBy(mgr).Named("sfcluster-hold").
		WatchesRawSource(source.Kind[ctrlclient.Object](mgr.GetCache(), &osbv1alpha1.SFServiceInstance{}, scheduled)).
		WithOptions(copts()).Complete(reconcile.Func(hold))
	if err != nil {
		return fmt.Errorf("registering the SFCluster holds: %w", err)
	}
	return nil
}

// holdFor enqueues the SFCluster an instance is scheduled on, if any.
func holdFor(o ctrlclient.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if req, ok := clusterOf(o); ok && o.GetDeletionTimestamp() == nil {
		q.Add(req)
	}
}

// clusterOf is the request of the SFCluster an instance is scheduled on;
// false for one on no cluster.
func clusterOf(o ctrlclient.Object) (reconcile.Request, bool) {
	id := o.(*osbv1alpha1.SFServiceInstance).Spec.ClusterID
	return reconcile.Request{NamespacedName: ctrlclient.ObjectKey{Namespace: o.GetNamespace(), Name: id}}, id != ""
}
