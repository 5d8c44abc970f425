package starter

import (
	"context"
	"fmt"
	"log/slog"

	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	scv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/metrics"
)

// fleetMetrics serves the fleet's state gauges (metrics.Fleet) from the
// watcher's cache while the watcher leads. Standbys serve none: they hold
// no caches until they lead, and filling them only for the gauges would
// double a standby's memory. A new leader serves them once its caches are
// synced, so a scrape misses them for a failover's seconds at most.
type fleetMetrics struct {
	mgr ctrl.Manager
}

// counted are the kinds metrics.Fleet counts: their informers are synced
// before the gauges are served, so that the first scrape counts them all.
var counted = []ctrlclient.Object{
	&osbv1alpha1.SFServiceInstance{}, &osbv1alpha1.SFServiceBinding{}, &osbv1alpha1.SFPlan{},
	&resourcev1alpha1.SFCluster{}, &primazav1alpha1.RegisteredService{}, &primazav1alpha1.ServiceClaim{},
	&scv1alpha1.ServiceBindingUsage{}, &sbv1.ServiceBinding{},
}

func setupFleetMetrics(mgr ctrl.Manager) error {
	if err := mgr.Add(&fleetMetrics{mgr: mgr}); err != nil {
		return fmt.Errorf("adding the fleet's metrics: %w", err)
	}
	return nil
}

// NeedLeaderElection is true: the leader serves the gauges.
func (f *fleetMetrics) NeedLeaderElection() bool { return true }

// Start serves the gauges from this watcher's cache until it stops.
func (f *fleetMetrics) Start(ctx context.Context) error {
	for _, obj := range counted {
		// A kind that cannot be watched (its CRD missing) is left out of
		// the scrapes, which say so in the log; the watcher goes on.
		if _, err := f.mgr.GetCache().GetInformer(ctx, obj); err != nil && ctx.Err() == nil {
			slog.Default().Warn("the fleet's metrics cannot watch a kind", "kind", fmt.Sprintf("%T", obj), "error", err)
		}
	}
	stop := metrics.Serve(f.mgr.GetCache(), slog.Default())
	<-ctx.Done()
	stop()
	return nil
}
