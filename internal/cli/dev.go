package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/internal/devenv"
	"github.com/quartermaster/qm/internal/scheduling"
)

func newDevCommand(g *globals) *cobra.Command {
	o := devenv.Options{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine: Kubernetes, Temporal with its UI, worker, watcher and API",
		Long: `Starts a real kube-apiserver and etcd, the Temporal dev server with its Web UI
and Quartermaster's search attributes, installs the CRDs, and runs the worker,
the watcher and the API in this process. State is kept under --data-dir, so a
restart keeps every instance. Ctrl-C stops everything.

With KUBECONFIG set, that cluster is used instead of the embedded one; with a
Temporal configured as for the other commands (TEMPORAL_ADDRESS, a
temporal.toml profile, --temporal-address), that Temporal is used instead of
the dev server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.BinDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.BinDir = filepath.Dir(exe)
			}
			o.Kubeconfig = g.kubeconfig
			switch opts, err := g.temporalOptions(); {
			case errors.Is(err, errNoTemporal):
				o.Namespace = cmp.Or(g.temporalNamespace, os.Getenv("TEMPORAL_NAMESPACE"), "default")
			case err != nil:
				return err
			default:
				o.Temporal = func(ctx context.Context) (client.Client, error) { return dialTemporal(ctx, opts, g.logger) }
				o.TemporalAddress, o.Namespace = opts.HostPort, opts.Namespace
			}
			o.Out = cmd.OutOrStdout()
			o.Logger = g.logger
			var err error
			if o.TemporalMetrics, err = temporalMetrics(); err != nil {
				return err
			}
			if _, err := scheduling.Parse(string(o.Scheduler)); err != nil {
				return fmt.Errorf("QM_SCHEDULER: %w", err)
			}
			return devenv.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.BinDir, "bin-dir", "", "directory of kube-apiserver, etcd and temporal (default: the directory of qm)")
	f.StringVar(&o.DataDir, "data-dir", ".qm", "directory for etcd data, Temporal's SQLite file, the kubeconfig and logs")
	f.IntVar(&o.KubePort, "kube-port", 16443, "port of the embedded Kubernetes API server")
	f.IntVar(&o.TemporalPort, "temporal-port", 7233, "port of the embedded Temporal frontend")
	f.IntVar(&o.UIPort, "ui-port", 8233, "port of the Temporal Web UI")
	f.IntVar(&o.MetricsPort, "metrics-port", 9090, "port of the worker's and the watcher's Prometheus /metrics; 0 serves none")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "listen address of the OSB API")
	f.StringVar(&o.AdminListen, "admin-listen", "127.0.0.1:8081", `listen address of the admin API; "" serves none`)
	f.StringVar(&o.APIMetricsListen, "api-metrics-listen", "127.0.0.1:9092", `listen address of the API's Prometheus /metrics; "" serves none`)
	f.DurationVar(&o.HealthCheckMinute, "healthcheck-minute", time.Minute, healthCheckMinuteUsage)
	schedulerFlag(f, &o.Scheduler)
	return cmd
}

// schedulerFlag adds --scheduler, whose default is QM_SCHEDULER's.
func schedulerFlag(f *pflag.FlagSet, s *scheduling.Scheduler) {
	names := make([]string, len(scheduling.Schedulers))
	for i, name := range scheduling.Schedulers {
		names[i] = string(name)
	}
	f.Var(&schedulerValue{s}, "scheduler", "how the cluster of a new instance is chosen among the SFClusters: "+strings.Join(names, ", ")+" (env QM_SCHEDULER)")
	*s = scheduling.Scheduler(envOr("QM_SCHEDULER", string(scheduling.Default)))
}

// schedulerValue is --scheduler, which names one of the schedulers.
type schedulerValue struct{ s *scheduling.Scheduler }

func (v *schedulerValue) String() string { return string(*v.s) }
func (v *schedulerValue) Type() string   { return "name" }
func (v *schedulerValue) Set(name string) error {
	s, err := scheduling.Parse(name)
	if err != nil {
		return err
	}
	*v.s = s
	return nil
}

// healthCheckMinuteUsage explains --healthcheck-minute.
const healthCheckMinuteUsage = "how long a minute of the RegisteredServices' health checks lasts; shorter only for demos"
