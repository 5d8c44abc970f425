package starter

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/tenancy"
)

// newQueue is a controller's NewQueue: client-go's rate-limiting workqueue,
// ordered by fairness.Queue, so that one tenant's burst of events does not
// hold another tenant's reconciles behind it (Temporal's fairness would
// otherwise only see the second tenant's run after the first's thousand
// had been started). It replaces controller-runtime's priority queue,
// whose order is first come, first served within a priority.
func newQueue(tenant func(reconcile.Request) string) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		// Named, each queue's metrics (workqueue_depth and the others) are
		// registered as controller-runtime registers its own.
		ordered := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{
			Name: name, Queue: fairness.NewQueue(tenant),
		})
		delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{
			Name: name, Queue: ordered,
		})
		return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
			Name: name, DelayingQueue: delaying,
		})
	}
}

// namespaceTenant is the tenant of a request for a kind whose objects
// belong to their namespace's users.
func namespaceTenant(req reconcile.Request) string { return fairness.Tenant(req.Namespace, "") }

// objectTenant is the tenant of a request for obj's kind as tenantOf has
// it (an OSB instance's organization, else its namespace), read from the
// manager's informer store: no copy and no wait, since the workqueue asks
// under its lock. A request whose object is not there (deleted) counts for
// its namespace.
func objectTenant(ctx context.Context, mgr manager.Manager, obj ctrlclient.Object, catalog tenancy.Boundary) (func(reconcile.Request) string, error) {
	informer, err := mgr.GetCache().GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("getting the informer of %T for the reconcile queue's order: %w", obj, err)
	}
	stored, ok := informer.(interface{ GetStore() toolscache.Store })
	if !ok {
		return namespaceTenant, nil
	}
	store := stored.GetStore()
	return func(req reconcile.Request) string {
		item, found, err := store.GetByKey(req.String())
		if o, isObject := item.(ctrlclient.Object); err == nil && found && isObject {
			return tenantOf(o, catalog)
		}
		return namespaceTenant(req)
	}, nil
}
