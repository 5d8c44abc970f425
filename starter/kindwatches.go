package starter

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// kindWatches starts a controller's watches of kinds chosen at run time,
// each once: the workloads UsageKinds and ServiceBindings name, the
// Provisioned Services of others, the resources of ServiceClasses. Such a
// kind is known only once a resource names it, and watching it costs a
// cache of its objects, so it is watched from the first time on.
type kindWatches struct {
	// of names what the watches wake, for errors ("the ServiceBindings").
	of string

	mu      sync.Mutex
	started map[schema.GroupVersionKind]bool
}

// ensure starts c's watch of gvk that src makes, unless it was started.
func (k *kindWatches) ensure(c controller.Controller, gvk schema.GroupVersionKind, src func() source.Source) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started[gvk] {
		return nil
	}
	if err := c.Watch(src()); err != nil {
		return fmt.Errorf("watching %s for %s: %w", gvk, k.of, err)
	}
	if k.started == nil {
		k.started = map[schema.GroupVersionKind]bool{}
	}
	k.started[gvk] = true
	return nil
}
