package apply_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestApplyWritesOnlyAfterItsCheck: with After, the apply reads its
// objects' fences while the check runs, writes nothing until the check
// has said yes, and writes nothing at all when it says no (or when there
// is nothing to write, still says why).
func TestApplyWritesOnlyAfterItsCheck(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	direct, err := client.NewWithWatch(kube.Config, client.Options{})
	require.NoError(t, err)

	// The check ends once the first object's fence has been read: a check
	// that ran before the reads, or reads that waited for it, never ends
	// it, and the apply fails with the check's timeout.
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	read := make(chan struct{})
	var readOnce sync.Once
	watched := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			readOnce.Do(func() { record("read"); close(read) })
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			record("write " + obj.GetName())
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	check := func() error {
		select {
		case <-read:
			record("checked")
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("no fence was read while the check ran")
		}
	}
	_, err = apply.Objects(ctx, watched, reg, apply.Fence{Generation: 1}, ns, configMap(t, "small"), apply.After(check))
	require.NoError(t, err)
	assert.Equal(t, []string{"read", "checked", "write config"}, events, "read beside the check, written after it")

	// A check that says no: nothing is written, and its error is the apply's.
	gone := errors.New("the instance is gone")
	events = nil
	_, err = apply.Objects(ctx, watched, reg, apply.Fence{Generation: 2}, ns, objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n"),
		apply.After(func() error { return gone }))
	require.ErrorIs(t, err, gone)
	assert.NotContains(t, events, "write other")
	err = kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "nothing written: %v", err)

	// Nothing to write: the check still runs, and says no.
	_, err = apply.Objects(ctx, watched, reg, apply.Fence{Generation: 2}, ns, nil, apply.After(func() error { return gone }))
	require.ErrorIs(t, err, gone)
}
