package cli

import (
	"context"

	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/tenancy"
)

// run connects to the cluster named by --kubeconfig (or the pod's) and,
// when withTemporal is set, to Temporal, then runs the components o names
// until ctx is done.
func (g *globals) run(ctx context.Context, withTemporal bool, o system.Options) error {
	cfg, err := kubeConfig(g.kubeconfig)
	if err != nil {
		return err
	}
	o.Kube = cfg
	o.Catalog = tenancy.Boundary{Catalog: g.catalog}
	o.Namespaces = g.watched
	if withTemporal {
		tc, opts, err := g.temporal(ctx)
		if err != nil {
			return err
		}
		defer tc.Close()
		o.Temporal = tc
		if o.Probes != nil {
			o.Probes.Ready = telemetry.TemporalReachable(tc, opts.HostPort)
		}
		if o.Watcher != nil {
			o.Watcher.TemporalAddress, o.Watcher.TemporalNamespace = opts.HostPort, opts.Namespace
		}
		if o.Worker {
			o.TemporalNamespace, o.WorkerVersioning.Namespace = opts.Namespace, opts.Namespace
			o.WorkerVersioning.Payloads = opts.DataConverter
		}
	}
	return system.Run(ctx, o)
}
