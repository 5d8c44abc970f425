package starter

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/quartermaster/qm/crds"
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

// classResources is where the ServiceClasses watch and list the kinds
// they name: the watcher's cache, or on a sharded first shard a cache of
// its own, so that a class of a sharded kind (a class of SFServiceInstances)
// registers every object of it, not the shard's part. Its informers start
// when a class names a kind; without such a class it holds nothing.
func classResources(mgr ctrl.Manager, s sharding.Shard, namespaces []string) (cache.Cache, error) {
	if !s.Sharded() {
		return mgr.GetCache(), nil
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: crds.NewScheme(), NewInformer: informers.New,
		DefaultTransform: cache.TransformStripManagedFields(), DefaultNamespaces: informers.Namespaces(namespaces)})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of the ServiceClasses' kinds: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the cache of the ServiceClasses' kinds: %w", err)
	}
	return c, nil
}

// enqueueAfter is h with each request it enqueues added after d.
func enqueueAfter(h handler.EventHandler, d time.Duration) handler.EventHandler {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.Funcs{
		CreateFunc:  func(ctx context.Context, e event.CreateEvent, q queue) { h.Create(ctx, e, delayed{q, d}) },
		UpdateFunc:  func(ctx context.Context, e event.UpdateEvent, q queue) { h.Update(ctx, e, delayed{q, d}) },
		DeleteFunc:  func(ctx context.Context, e event.DeleteEvent, q queue) { h.Delete(ctx, e, delayed{q, d}) },
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) { h.Generic(ctx, e, delayed{q, d}) },
	}
}

// delayed is a queue whose Add adds after a delay.
type delayed struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	after time.Duration
}

func (q delayed) Add(r reconcile.Request) { q.AddAfter(r, q.after) }

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
