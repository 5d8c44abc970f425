// Package informers makes the informers of every cache in Quartermaster
// (the watcher's, the API's catalog, the worker's) come back within a
// second of the API server.
//
// client-go's reflector backs off after each failed list or watch,
// doubling up to 30 s with as much jitter again, and that backoff cannot be
// set through an informer. After the API server was away for twenty
// seconds (a restart, an upgrade), an informer would then wait up to as
// long again before it saw anything: the watcher would start no operation
// and the catalog would not change, though the API server answered. So the
// informers here hand their reflector a list and watch that ask again
// every RetryEvery while the API server cannot be reached, for up to
// RetryFor, and only then report the failure to the reflector and its
// backoff. Their watch also lives through the API server's restart
// without the reflector's backoff (resync.go).
package informers

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// How a list or watch asks again while the API server cannot be reached.
// Every half second is light for one API server (a watcher has a few dozen
// informers), and a minute covers a restart; past that, client-go's
// backoff protects an API server that stays in trouble.
const (
	RetryEvery = 500 * time.Millisecond
	RetryFor   = time.Minute
)

// New is a cache.Options.NewInformer: controller-runtime's informer, whose
// list and watch ask again while the API server cannot be reached, and
// whose watch lives through the API server's restart (resync.go).
func New(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	p := &patient{inner: toolscache.ToListerWatcherWithContext(lw), example: obj}
	inf := toolscache.NewSharedIndexInformer(p, obj, resync, indexers)
	p.store, p.synced = inf.GetStore(), inf.HasSynced
	return inf
}

// Patient wraps lw so that its list and watch ask again every RetryEvery,
// for up to RetryFor, while the error says the API server cannot be
// reached; any other error (a refusal, an expired resource version) goes
// to the reflector at once.
func Patient(lw toolscache.ListerWatcher) toolscache.ListerWatcher {
	return &patient{inner: toolscache.ToListerWatcherWithContext(lw)}
}

// patient is the list and watch of Patient and New.
type patient struct {
	inner toolscache.ListerWatcherWithContext
	// store and synced are the informer's, and example an object of its
	// kind: with them a watch heals when its resource version expires
	// (resync.go). Without (Patient), the expiry goes to the reflector.
	store   toolscache.Store
	synced  func() bool
	example runtime.Object
	// last is the last event a healing watch passed on, which the store
	// has applied once it shows it (resync.go).
	mu   sync.Mutex
	last watch.Event
}

func (p *patient) List(opts metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), opts)
}

func (p *patient) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), opts)
}

// ListWithContext is the reflector's list: what the store shows from now
// on comes from it, not from the last event a healing watch passed on.
func (p *patient) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	p.forget()
	return p.list(ctx, opts)
}

func (p *patient) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	// A watch that streams the initial list (WatchList) is the
	// reflector's list itself: its expiry is the reflector's to handle.
	if opts.SendInitialEvents != nil {
		p.forget()
		return p.watch(ctx, opts)
	}
	w, err := p.watch(ctx, opts)
	if err != nil || p.store == nil {
		return w, err
	}
	return heal(ctx, p, opts, w), nil
}

func (p *patient) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return again(ctx, func() (runtime.Object, error) { return p.inner.ListWithContext(ctx, opts) })
}

func (p *patient) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return again(ctx, func() (watch.Interface, error) { return p.inner.WatchWithContext(ctx, opts) })
}

// again calls call until it succeeds, fails for another reason than an
// absent API server, RetryFor has passed, or ctx is done.
func again[T any](ctx context.Context, call func() (T, error)) (T, error) {
	deadline := time.Now().Add(RetryFor)
	for {
		v, err := call()
		if err == nil || !Unreachable(err) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(RetryEvery):
		}
	}
}

// Unreachable tells an error that says the API server could not be reached
// or is not ready yet (a refused connection, a reset, a timeout, a 503
// while it starts) from an answer it gave.
func Unreachable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
	}
	return true
}
