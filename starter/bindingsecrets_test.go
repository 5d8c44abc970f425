package starter

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// countingManager is a manager that only counts what is added to it: the
// caches ensure makes are never started here.
type countingManager struct {
	ctrl.Manager
	added []manager.Runnable
}

func (m *countingManager) GetConfig() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }

func (m *countingManager) Add(r manager.Runnable) error {
	m.added = append(m.added, r)
	return nil
}

// refusingController refuses its first refusals watches, then records
// each source it is given.
type refusingController struct {
	controller.Controller
	refusals int
	watched  int
}

func (c *refusingController) Watch(source.TypedSource[reconcile.Request]) error {
	if c.refusals > 0 {
		c.refusals--
		return errors.New("refused")
	}
	c.watched++
	return nil
}

// nopSource is a source that never sends.
type nopSource struct{}

func (nopSource) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

// TestEnsureTakesUpAFailedWatchOnTheSameCache: a reader whose watch of a
// namespace's credentials Secrets fails makes ensure fail; the retry
// watches on the cache the first try made, adds no second cache to the
// manager, and does not watch the readers that took again.
func TestEnsureTakesUpAFailedWatchOnTheSameCache(t *testing.T) {
	mgr := &countingManager{}
	b := newBindingSecrets(mgr, true)
	var caches []cache.Cache
	sources := func(c cache.Cache) []source.Source {
		caches = append(caches, c)
		return []source.Source{nopSource{}}
	}
	first, second := &refusingController{}, &refusingController{refusals: 1}
	b.readers = []secretReader{{ctl: first, sources: sources}, {ctl: second, sources: sources}}

	require.ErrorContains(t, b.ensure("tenant"), "watching the credentials Secrets of tenant: refused")
	require.NoError(t, b.ensure("tenant"))
	require.NoError(t, b.ensure("tenant"))

	assert.Len(t, mgr.added, 1, "one cache for the namespace, however many tries")
	require.Len(t, caches, 3, "the first reader's sources once, the second's on each of its two tries")
	assert.Same(t, caches[0], caches[2], "the retry is on the first try's cache")
	assert.Equal(t, 1, first.watched, "the reader that took is not watched again")
	assert.Equal(t, 1, second.watched)

	require.NoError(t, b.ensure("other"))
	assert.Len(t, mgr.added, 2, "another namespace has a cache of its own")
}
