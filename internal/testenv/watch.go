package testenv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
)

// Watch calls on with every event of the objects that list and opts select
// (a kind, a namespace, a name), from now until the function it returns is
// called: every write, where a poll would read two close together as one.
// on runs on a goroutine of its own, so it only records; it never fails
// the test. The returned function stops the watch and returns once on has
// seen its last event; it fails the test if the watch ended before it was
// called, since events would be missing.
func (c *Cluster) Watch(t testing.TB, list ctrlclient.ObjectList, on func(watch.Event), opts ...ctrlclient.ListOption) (stop func()) {
	t.Helper()
	wc, err := ctrlclient.NewWithWatch(c.Config, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, list, opts...)
	if err != nil {
		cancel()
		require.NoError(t, err, "watching %T", list)
	}
	stopped, done := make(chan struct{}), make(chan struct{})
	early := false
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			on(ev)
		}
		select {
		case <-stopped:
		default:
			early = true
		}
	}()
	return func() {
		t.Helper()
		close(stopped)
		w.Stop()
		cancel()
		<-done
		if early {
			t.Errorf("the watch of %T ended before the test stopped it: events are missing", list)
		}
	}
}
