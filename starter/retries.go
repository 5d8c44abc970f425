package starter

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// reconcilerOptions returns the options of one reconciler; each call makes
// a retry limiter of its own, so that one reconciler's failures never slow
// another's.
type reconcilerOptions func() controller.Options

// reconcileRetryMax bounds how long a reconcile that failed waits before
// it is tried again. A reconcile fails when a part is away (Temporal
// restarting, the API server down); controller-runtime's default backoff
// then doubles up to 1000 s, so a resource whose reconciles failed for
// twenty seconds would wait as long again after the part came back.
// Capped here, work resumes within reconcileRetryMax of its return. (A
// workflow's steps retry on their own bound, workflows' stepRetryMax.)
const reconcileRetryMax = 5 * time.Second

// retryLimiter paces a reconciler's retries: per resource, doubling from
// 5 ms up to reconcileRetryMax; in all, controller-runtime's default
// bucket of 10 retries a second (bursts of 100), which keeps a watcher
// whose every resource fails from hammering the API server or Temporal.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, reconcileRetryMax),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
