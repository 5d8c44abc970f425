package starter

import (
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/quartermaster/qm/internal/fairness"
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
