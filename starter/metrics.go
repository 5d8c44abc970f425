package starter

import (
	"context"
	"fmt"
	"log/slog"

	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/internal/sharding"
)

// fleetMetrics serves the fleet's state gauges (metrics.Fleet) from the
// watcher's cache while the watcher leads. Standbys serve none: they hold
// no caches until they lead, and filling them only for the gauges would
// double a standby's memory. A new leader serves them once its caches are
// synced, so a scrape misses them for a failover's seconds at most.
//
// A shard other than the first counts its own instances and bindings
// only: the first counts the kinds no shard divides.
type fleetMetrics struct {
	mgr   ctrl.Manager
	only  []ctrlclient.Object
	shard sharding.Shard
}

func setupFleetMetrics(mgr ctrl.Manager, shard sharding.Shard) error {
	f := &fleetMetrics{mgr: mgr, shard: shard}
	if !shard.First() {
		f.only = sharding.Kinds()
	}
	if err := mgr.Add(f); err != nil {
		return fmt.Errorf("adding the fleet's metrics: %w", err)
	}
	return nil
}

// NeedLeaderElection is true: the leader serves the gauges.
func (f *fleetMetrics) NeedLeaderElection() bool { return true }

// Start serves the gauges from this watcher's cache until it stops.
func (f *fleetMetrics) Start(ctx context.Context) error {
	kinds := f.only
	if len(kinds) == 0 {
		kinds = metrics.Kinds()
	}
	for _, obj := range kinds {
		// A kind that cannot be watched (its CRD missing) is left out of
		// the scrapes, which say so in the log; the watcher goes on.
		if _, err := f.mgr.GetCache().GetInformer(ctx, obj); err != nil && ctx.Err() == nil {
			slog.Default().Warn("the fleet's metrics cannot watch a kind", "kind", fmt.Sprintf("%T", obj), "error", err)
		}
	}
	stop := metrics.Serve(metrics.Fleet{Reader: f.mgr.GetCache(), Logger: slog.Default(), Only: f.only, Shard: f.shard.String()})
	<-ctx.Done()
	stop()
	return nil
}
