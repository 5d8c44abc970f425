package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/starter"
)

func newWatcherCommand(g *globals) *cobra.Command {
	o := starter.WatcherOptions{}
	var shard string
	cmd := &cobra.Command{
		Use:   "watcher",
		Short: "Run the watcher that turns resource events into workflow starts (leader-elected)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sharding.Parse(shard)
			if err != nil {
				return fmt.Errorf("--shard: %w", err)
			}
			o.Shard = s
			if s.Sharded() {
				host, _ := os.Hostname()
				g.identity = fmt.Sprintf("qm-watcher shard %s %d@%s", s, os.Getpid(), host)
			}
			return g.run(cmd.Context(), true, system.Options{Watcher: &o})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect one active watcher among replicas")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease (default: the pod's namespace)")
	f.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the leader's last renewal before it takes over")
	f.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up leading")
	f.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often the leader renews and a standby tries")
	f.StringVar(&o.HealthAddr, "health-addr", ":8081", "address serving /healthz and /readyz; 0 turns them off")
	f.StringVar(&o.MetricsAddr, "metrics-addr", ":9090", "address serving Prometheus /metrics (controller-runtime's and the Temporal client's); 0 turns it off")
	f.IntVar(&o.Concurrency, "concurrency", 16, "resources reconciled at once per kind")
	f.DurationVar(&o.ClusterProbePeriod, "cluster-probe-period", starter.DefaultClusterProbePeriod, "how often each SFCluster's cluster is probed")
	f.StringVar(&shard, "shard", "", "the shard N/M (N from 0) of the instances and bindings this watcher owns, on a lease of its own; shard 0 also does every other kind's work (default: one watcher owns all)")
	f.StringVar(&o.WorkerServiceAccount, "worker-service-account", "", "the workers' service account (namespace:name) when it is not the watcher's, whose access to UsageKinds' workloads is checked (the chart sets it)")
	return cmd
}
