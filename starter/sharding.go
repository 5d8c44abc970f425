package starter

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/sharding"
)

// leaseName is the Lease of a shard's leader: LeaseName for the whole, and
// one per shard of a sharding, so that each shard has its leader and its
// standbys.
func leaseName(s sharding.Shard) string {
	if !s.Sharded() {
		return LeaseName
	}
	return fmt.Sprintf("qm-watcher-%d-of-%d.quartermaster.io", s.Index, s.Count)
}

// shardCache restricts the cache of a sharded watcher's sharded kinds to
// the shard's own buckets, selected by the API server: each shard holds
// and reconciles only its part of the instances and bindings.
func shardCache(opts *cache.Options, s sharding.Shard) {
	if !s.Sharded() {
		return
	}
	for _, kind := range sharding.Kinds() {
		opts.ByObject[kind] = cache.ByObject{Label: s.Selector()}
	}
}

// everyObject is where the first shard's work on other kinds reads the
// sharded kinds: usages and ServiceBindings wait for any binding's Secret,
// an SFCluster counts every instance scheduled on it, a ServiceClass may
// register any instance. A whole watcher reads its own cache. A sharded
// first shard watches every instance and binding once more, each stripped
// to what those readers use (everyTransform), which is a fraction of the
// object; standbys and the other shards hold none of it.
func everyObject(mgr ctrl.Manager, s sharding.Shard) (cache.Cache, error) {
	if !s.Sharded() {
		return mgr.GetCache(), nil
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: crds.NewScheme(), NewInformer: informers.New,
		DefaultTransform: everyTransform})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of every instance and binding: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the cache of every instance and binding: %w", err)
	}
	return c, nil
}

// everyTransform keeps of an instance its cluster, and of a binding its
// Secret; any other object loses its managedFields only.
func everyTransform(in any) (any, error) {
	switch o := in.(type) {
	case *osbv1alpha1.SFServiceInstance:
		out := &osbv1alpha1.SFServiceInstance{ObjectMeta: references(o.ObjectMeta)}
		out.Spec.ClusterID = o.Spec.ClusterID
		return out, nil
	case *osbv1alpha1.SFServiceBinding:
		out := &osbv1alpha1.SFServiceBinding{ObjectMeta: references(o.ObjectMeta)}
		out.Status.Response.SecretRef = o.Status.Response.SecretRef
		return out, nil
	}
	return cache.TransformStripManagedFields()(in)
}

// references is the part of an object's metadata that names it.
func references(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp, Labels: m.Labels}
}

// setupStamper has the first shard of several label each instance and
// binding that no shard owns yet with its bucket: one made with kubectl,
// or before the watchers were sharded (the OSB API labels what it
// creates). Its cache selects only the objects without a valid label, so
// it holds nothing at rest.
func setupStamper(mgr ctrl.Manager, copts reconcilerOptions) error {
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: crds.NewScheme(), NewInformer: informers.New,
		DefaultLabelSelector: sharding.Unstamped(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return fmt.Errorf("creating the cache of the objects to stamp: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("adding the cache of the objects to stamp: %w", err)
	}
	for _, kind := range sharding.Kinds() {
		st := &stamper{cache: c, kube: mgr.GetClient(), kind: kind}
		o := copts()
		o.Reconciler = st
		ctl, err := controller.New("stamp-"+strings.ToLower(reflect.TypeOf(kind).Elem().Name()), mgr, o)
		if err != nil {
			return fmt.Errorf("registering the stamper of %T: %w", kind, err)
		}
		if err := ctl.Watch(source.Kind[ctrlclient.Object](c, kind, &handler.EnqueueRequestForObject{})); err != nil {
			return fmt.Errorf("watching the %T to stamp: %w", kind, err)
		}
	}
	return nil
}

// stamper labels the objects of one kind with their bucket.
type stamper struct {
	cache cache.Cache
	kube  ctrlclient.Client
	kind  ctrlclient.Object
}

// Reconcile labels one object; a merge patch of the label alone, so it
// races with no other writer.
func (s *stamper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := s.kind.DeepCopyObject().(ctrlclient.Object)
	if err := s.cache.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	before := obj.DeepCopyObject().(ctrlclient.Object)
	if !sharding.Stamp(obj) {
		return reconcile.Result{}, nil
	}
	if err := s.kube.Patch(ctx, obj, ctrlclient.MergeFrom(before)); err != nil {
		return reconcile.Result{}, ctrlclient.IgnoreNotFound(fmt.Errorf("labelling %T %s with its shard: %w", obj, req, err))
	}
	slog.Default().Debug("labelled with its shard", "object", req.String(), "bucket", obj.GetLabels()[sharding.Label])
	return reconcile.Result{}, nil
}
