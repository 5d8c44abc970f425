package informers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

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
