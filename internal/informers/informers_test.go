package informers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/quartermaster/qm/internal/informers"
)

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func TestUnreachable(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a refused connection", fmt.Errorf("Get \"https://127.0.0.1:6443\": %w", refused), true},
		{"a reset connection", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{"the API server starting (503)", apierrors.NewServiceUnavailable("not ready"), true},
		{"too many requests", apierrors.NewTooManyRequests("later", 1), true},
		{"a timeout the server gave", apierrors.NewTimeoutError("slow", 1), true},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{"an expired resource version", apierrors.NewResourceExpired("too old"), false},
		{"not found", apierrors.NewNotFound(gr, "x"), false},
		{"the informer stopping", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, informers.Unreachable(tc.err))
		})
	}
}

// flaky fails its first failures lists and watches with err.
type flaky struct {
	err           error
	failures      int
	lists, watchs int
}

func (f *flaky) List(metav1.ListOptions) (runtime.Object, error) {
	if f.lists++; f.lists <= f.failures {
		return nil, f.err
	}
	return &corev1.ConfigMapList{}, nil
}

func (f *flaky) Watch(metav1.ListOptions) (watch.Interface, error) {
	if f.watchs++; f.watchs <= f.failures {
		return nil, f.err
	}
	return watch.NewEmptyWatch(), nil
}

func TestPatientAsksAgainWhileTheAPIServerIsAway(t *testing.T) {
	ctx := context.Background()
	f := &flaky{err: refused, failures: 2}
	lw := toolscache.ToListerWatcherWithContext(informers.Patient(f))
	got, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the third list gets through")
	assert.IsType(t, &corev1.ConfigMapList{}, got)
	assert.Equal(t, 3, f.lists)
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the third watch gets through")
	w.Stop()
	assert.Equal(t, 3, f.watchs)
}

func TestPatientPassesAnAnswerOnAtOnce(t *testing.T) {
	f := &flaky{err: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no")), failures: 5}
	lw := toolscache.ToListerWatcherWithContext(informers.Patient(f))
	_, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.Equal(t, 1, f.lists, "a refusal is the reflector's to handle")
}

func TestPatientStopsWithItsInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &flaky{err: refused, failures: 1000}
	lw := toolscache.ToListerWatcherWithContext(informers.Patient(f))
	_, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	require.Error(t, err)
	assert.Equal(t, 1, f.lists, "a stopped informer asks no more")
}

// expiring lists and watches ConfigMaps: its first watch says its
// resource version expired, as a restarted API server does.
type expiring struct {
	mu      sync.Mutex
	lists   []*corev1.ConfigMapList // what each list returns, the last repeated
	listed  []string                // the resource version each list asked for
	watched []string                // the resource version of each watch
}

func (e *expiring) List(opts metav1.ListOptions) (runtime.Object, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.lists[min(len(e.listed), len(e.lists)-1)]
	e.listed = append(e.listed, opts.ResourceVersion)
	return l.DeepCopy(), nil
}

func (e *expiring) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		// As an API server without streaming lists: the reflector lists.
		return nil, apierrors.NewBadRequest("sendInitialEvents is not supported")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.watched = append(e.watched, opts.ResourceVersion)
	w := watch.NewFakeWithChanSize(1, false)
	if len(e.watched) == 1 {
		w.Error(&apierrors.NewResourceExpired("too old resource version: 10 (15)").ErrStatus)
	}
	return w, nil
}

func (e *expiring) seen() (listed, watched []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.listed), slices.Clone(e.watched)
}

func configMaps(rv string, items ...corev1.ConfigMap) *corev1.ConfigMapList {
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}
}

func configMap(name, rv string) corev1.ConfigMap {
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, ResourceVersion: rv}}
}

// A watch whose resource version expired lists again itself: the
// informer's store gets what changed, lost what went, and the reflector
// neither lists again (after its backoff) nor learns of the expiry.
func TestAnExpiredWatchListsAgainWithoutTheReflector(t *testing.T) {
	lw := &expiring{lists: []*corev1.ConfigMapList{
		configMaps("10", configMap("kept", "5"), configMap("changed", "6"), configMap("gone", "7")),
		configMaps("20", configMap("kept", "5"), configMap("changed", "16"), configMap("new", "18")),
	}}
	inf := informers.New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.RunWithContext(ctx)
	versions := func() map[string]string {
		out := map[string]string{}
		for _, obj := range inf.GetStore().List() {
			cm := obj.(*corev1.ConfigMap)
			out[cm.Name] = cm.ResourceVersion
		}
		return out
	}
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"kept": "5", "changed": "16", "new": "18"}, versions())
		listed, watched := lw.seen()
		// The reflector lists from "0" (its cache), and would list again
		// from the expired version; the list after the expiry is
		// consistent ("").
		assert.Equal(c, []string{"0", ""}, listed, "the reflector's list, then the watch's own")
		assert.Equal(c, []string{"10", "20"}, watched, "the watch goes on from the new list")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "20", inf.LastSyncResourceVersion(), "the reflector is at the new list's version")
}
