package informers

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
)

// A watch that lives through the API server's restart.
//
// A restarted API server's watch cache begins at etcd's revision of the
// moment, so the informer's watch, resumed from the last resource version
// it saw, is told that version is too old (410) and the reflector lists
// again. It does so only after a step of its backoff, which grows with
// every list from 0.8 s to 30 s (with as much jitter again) and starts
// over only two minutes after it last did: after three or four restarts
// in those two minutes (a rolling upgrade of an HA control plane, or the
// chaos run) the watcher saw nothing for 10 to 45 s after the API server
// was back. So the watch lists again itself, at once: it hands the
// reflector the differences between the list and the informer's store as
// events, then a bookmark at the list's resource version, and watches on
// from there. The reflector never sees the expiry.

// healing is a watch that lists again when its resource version expires.
type healing struct {
	p      *patient
	opts   metav1.ListOptions
	out    chan watch.Event
	stop   chan struct{}
	cancel context.CancelFunc // ends a list or watch under way at Stop
	once   sync.Once
}

// heal wraps w, the watch p started with opts.
func heal(ctx context.Context, p *patient, opts metav1.ListOptions, w watch.Interface) watch.Interface {
	ctx, cancel := context.WithCancel(ctx)
	h := &healing{p: p, opts: opts, out: make(chan watch.Event), stop: make(chan struct{}), cancel: cancel}
	go h.run(ctx, w)
	return h
}

func (h *healing) ResultChan() <-chan watch.Event { return h.out }

func (h *healing) Stop() {
	h.once.Do(func() {
		close(h.stop)
		h.cancel()
	})
}

// run passes w's events on until w ends or the watch is stopped; an expiry
// is replaced by the events of a new list and a watch from it.
func (h *healing) run(ctx context.Context, w watch.Interface) {
	defer close(h.out)
	defer func() { w.Stop() }()
	for {
		var e watch.Event
		var ok bool
		select {
		case <-h.stop:
			return
		case e, ok = <-w.ResultChan():
		}
		if !ok {
			return
		}
		if e.Type == watch.Error && expired(apierrors.FromObject(e.Object)) {
			next, err := h.resync(ctx)
			if err == nil {
				w.Stop()
				w = next
				continue
			}
			// The heal failed (the informer did not catch up, or the
			// list or the watch after it failed): the expiry goes to the
			// reflector, which lists again after its backoff.
		}
		if !h.send(e) {
			return
		}
	}
}

// send passes e on, unless the watch was stopped meanwhile.
func (h *healing) send(e watch.Event) bool {
	select {
	case h.out <- e:
		if e.Type != watch.Bookmark && e.Type != watch.Error {
			h.p.mu.Lock()
			h.p.last = e
			h.p.mu.Unlock()
		}
		return true
	case <-h.stop:
		return false
	}
}

// forget drops the last event passed on, when the reflector lists again.
func (p *patient) forget() {
	p.mu.Lock()
	p.last = watch.Event{}
	p.mu.Unlock()
}

// Until the store shows the last event passed on, the informer has yet to
// apply some (they wait in its queue), and the store is no base for the
// differences: an object added there and gone from the list would stay.
// After a list of the reflector's own, only its first is waited for
// (synced): a later one may still be on its way to the store, for the
// moment the informer takes to apply it.
const (
	caughtUpEvery = 10 * time.Millisecond
	caughtUpFor   = 10 * time.Second
)

// caughtUp waits until the store holds the reflector's initial list and
// shows the last event passed on.
func (h *healing) caughtUp(ctx context.Context) error {
	h.p.mu.Lock()
	last := h.p.last
	h.p.mu.Unlock()
	err := wait.PollUntilContextTimeout(ctx, caughtUpEvery, caughtUpFor, true, func(context.Context) (bool, error) {
		return h.p.synced() && applied(h.p.store, last), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the informer to apply what it was sent: %w", err)
	}
	return nil
}

// applied tells whether store shows e: the object at e's resource version,
// or after a Deleted gone (or made again: another UID). No event (the zero
// Event) is applied.
func applied(store toolscache.Store, e watch.Event) bool {
	if e.Object == nil {
		return true
	}
	key, err := toolscache.MetaNamespaceKeyFunc(e.Object)
	if err != nil {
		return true
	}
	now, exists, err := store.GetByKey(key)
	if err != nil {
		return false
	}
	if e.Type == watch.Deleted {
		return !exists || uid(now) != uid(e.Object)
	}
	return exists && resourceVersion(now) == resourceVersion(e.Object)
}

// resync lists the kind, sends what changed since the store last heard,
// and returns a watch from the list's resource version.
func (h *healing) resync(ctx context.Context) (watch.Interface, error) {
	if err := h.caughtUp(ctx); err != nil {
		return nil, err
	}
	opts := metav1.ListOptions{LabelSelector: h.opts.LabelSelector, FieldSelector: h.opts.FieldSelector}
	list, _, err := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return h.p.list(ctx, opts)
	})).ListWithAlloc(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing again after an expired watch: %w", err)
	}
	listed, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, err
	}
	events, err := differences(h.p.store, items)
	if err != nil {
		return nil, err
	}
	bookmark := h.p.example.DeepCopyObject()
	at, err := meta.Accessor(bookmark)
	if err != nil {
		return nil, err
	}
	at.SetResourceVersion(listed.GetResourceVersion())
	for _, e := range append(events, watch.Event{Type: watch.Bookmark, Object: bookmark}) {
		if !h.send(e) {
			return nil, context.Canceled
		}
	}
	opts = h.opts
	opts.ResourceVersion = listed.GetResourceVersion()
	return h.p.watch(ctx, opts)
}

// differences are the events that bring store to items: an Added for what
// it lacks, a Modified for what changed, a Deleted for what is gone. An
// event may repeat one the store has yet to apply; the informer takes it
// as the same change again.
func differences(store toolscache.Store, items []runtime.Object) ([]watch.Event, error) {
	var events []watch.Event
	listed := make(map[string]bool, len(items))
	for _, item := range items {
		key, err := toolscache.MetaNamespaceKeyFunc(item)
		if err != nil {
			return nil, err
		}
		listed[key] = true
		old, exists, err := store.GetByKey(key)
		switch {
		case err != nil:
			return nil, err
		case !exists:
			events = append(events, watch.Event{Type: watch.Added, Object: item})
		case resourceVersion(old) != resourceVersion(item):
			events = append(events, watch.Event{Type: watch.Modified, Object: item})
		}
	}
	for _, key := range store.ListKeys() {
		if listed[key] {
			continue
		}
		if old, exists, err := store.GetByKey(key); err == nil && exists {
			events = append(events, watch.Event{Type: watch.Deleted, Object: old.(runtime.Object)})
		}
	}
	return events, nil
}

func resourceVersion(obj any) string {
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetResourceVersion()
	}
	return ""
}

func uid(obj any) types.UID {
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetUID()
	}
	return ""
}

// expired tells the API server's answer that a resource version is too
// old to watch from.
func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
