// Command qm is Quartermaster: a Kubernetes service broker and service
// registry whose operations run as Temporal workflows. One binary serves
// every role; see `qm --help`.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/devenv"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/starter"
)

// globals are the flags every command shares.
type globals struct {
	kubeconfig        string
	temporalAddress   string
	temporalNamespace string
	temporalProfile   string
	logLevel          string
	logger            *slog.Logger
	// env is where the Temporal client configuration's variables are
	// looked up (nil: the process's environment).
	env envconfig.EnvLookup
}

func main() {
	// Started through a link of internal/childproc, this process becomes
	// etcd, kube-apiserver or temporal, bound to die with qm dev.
	childproc.Run()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qm:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "qm",
		Short: "Quartermaster: a Kubernetes service broker and registry on Temporal",
		Long: `Quartermaster (qm) brokers services on Kubernetes. Platforms call its Open
Service Broker API, Kubernetes users create its custom resources, and every
operation runs as a durable Temporal workflow that operators follow in the
Temporal UI.

One binary plays every part: 'qm dev' runs all of them on this machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			g.logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			slog.SetDefault(g.logger)
			ctrl.SetLogger(logr.FromSlogHandler(g.logger.Handler()))
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to use (env KUBECONFIG; in a pod, the pod's service account)")
	pf.StringVar(&g.temporalAddress, "temporal-address", "", "host:port of the Temporal frontend (over TEMPORAL_ADDRESS and the profile)")
	pf.StringVar(&g.temporalNamespace, "temporal-namespace", "", `Temporal namespace (over TEMPORAL_NAMESPACE and the profile; default "default")`)
	pf.StringVar(&g.temporalProfile, "temporal-profile", "", "profile of the Temporal client configuration file, temporal.toml (over TEMPORAL_PROFILE)")
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")

	root.AddCommand(
		newDevCommand(g),
		newWorkerCommand(g),
		newWatcherCommand(g),
		newAPICommand(g),
		newUsageKindCommand(g),
		newMassUpdateCommand(),
		newVersionCommand(),
	)
	return root
}

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
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "listen address of the OSB and admin API")
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

func newWorkerCommand(g *globals) *cobra.Command {
	var hosts []string
	var minute time.Duration
	var bounds plan.Bounds
	var scheduler scheduling.Scheduler
	probes := &telemetry.Server{Gatherer: ctrlmetrics.Registry}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the Temporal worker that hosts the workflows and activities (scales horizontally)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			probes.Logger = g.logger
			if _, err := scheduling.Parse(string(scheduler)); err != nil {
				return fmt.Errorf("QM_SCHEDULER: %w", err)
			}
			return g.run(cmd.Context(), true, system.Options{Worker: true, TemplateHosts: hosts, RenderBounds: bounds, HealthCheckMinute: minute, Probes: probes, Scheduler: scheduler})
		},
	}
	f := cmd.Flags()
	// Ports apart from the watcher's, so that both run side by side on one
	// machine; in a pod the chart sets them.
	f.StringVar(&probes.HealthAddr, "health-addr", ":8082", "address serving /healthz and /readyz (ready while Temporal answers); 0 turns them off")
	f.StringVar(&probes.MetricsAddr, "metrics-addr", ":9091", "address serving Prometheus /metrics (the Temporal SDK's and client-go's); 0 turns it off")
	f.StringSliceVar(&hosts, "chart-url-allow", splitList(os.Getenv("QM_TEMPLATE_HOSTS")),
		"the only hosts a template or chart url may name, redirects included (env QM_TEMPLATE_HOSTS, comma-separated; empty allows any)")
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "template-hosts" { // its name before it covered charts too
			name = "chart-url-allow"
		}
		return pflag.NormalizedName(name)
	})
	f.DurationVar(&bounds.Timeout, "render-timeout", plan.DefaultRenderTimeout, "wall time of one render of a template; beyond it the operation fails")
	f.Int64Var(&bounds.MaxOutput, "render-max-output", plan.DefaultRenderMaxOutput, "bytes one render of a template may write")
	f.Int64Var(&bounds.MaxMemory, "render-max-memory", plan.DefaultRenderMaxMemory, "bytes the functions of one render may make (strings, lists), checked before each call")
	f.DurationVar(&minute, "healthcheck-minute", time.Minute, healthCheckMinuteUsage)
	schedulerFlag(f, &scheduler)
	return cmd
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func newWatcherCommand(g *globals) *cobra.Command {
	o := starter.WatcherOptions{}
	cmd := &cobra.Command{
		Use:   "watcher",
		Short: "Run the watcher that turns resource events into workflow starts (leader-elected)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	return cmd
}

func newAPICommand(g *globals) *cobra.Command {
	var listen string
	var tlsFiles api.TLS
	srv := &api.Server{
		OSB:   api.Credentials{Username: os.Getenv("QM_OSB_USERNAME"), Password: os.Getenv("QM_OSB_PASSWORD")},
		Admin: api.Credentials{Username: os.Getenv("QM_ADMIN_USERNAME"), Password: os.Getenv("QM_ADMIN_PASSWORD")},
	}
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the OSB v2 and admin HTTP API (stateless, active-active)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case tlsFiles.CertFile != "" || tlsFiles.KeyFile != "":
				srv.TLS = &tlsFiles
			case tlsFiles.ClientCAFile != "":
				return errors.New("--tls-client-ca-file needs HTTPS: set --tls-cert-file and --tls-key-file too")
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listening on %s: %w", listen, err)
			}
			g.logger.Info("serving the API", "address", ln.Addr().String(), "namespace", srv.Namespace,
				"admin", srv.Admin.Username != "", "https", srv.TLS != nil, "clientCertificates", tlsFiles.ClientCAFile != "")
			srv.Logger = g.logger
			// Temporal serves the admin API's mass updates; without it the
			// OSB API still runs. A configuration that is there but cannot
			// be read is an error, not a reason to run without.
			_, err = g.temporalOptions()
			if err != nil && !errors.Is(err, errNoTemporal) {
				return err
			}
			return g.run(cmd.Context(), err == nil, system.Options{API: srv, APIListener: ln})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":8080", "listen address")
	f.StringVar(&srv.Namespace, "namespace", envOr("QM_NAMESPACE", "default"), "namespace whose SFServices and SFPlans are the catalog, and where OSB requests create instances and bindings (env QM_NAMESPACE)")
	f.StringVar(&srv.OSB.Username, "osb-username", srv.OSB.Username, "username OSB clients present (env QM_OSB_USERNAME)")
	f.StringVar(&srv.OSB.Password, "osb-password", srv.OSB.Password, "password OSB clients present (env QM_OSB_PASSWORD; prefer the environment: flags show in ps)")
	f.StringVar(&srv.Admin.Username, "admin-username", srv.Admin.Username, "username of the admin API (env QM_ADMIN_USERNAME; no credentials turn the admin API off)")
	f.StringVar(&srv.Admin.Password, "admin-password", srv.Admin.Password, "password of the admin API (env QM_ADMIN_PASSWORD)")
	f.DurationVar(&srv.SyncTimeout, "sync-timeout", api.DefaultSyncTimeout, "how long a synchronous provision, update or deprovision may take before the reply")
	f.DurationVar(&srv.BindTimeout, "bind-timeout", api.DefaultBindTimeout, "how long a synchronous bind or unbind may take before the reply")
	f.Int64Var(&srv.MaxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body accepted (413 beyond)")
	f.StringVar(&tlsFiles.CertFile, "tls-cert-file", os.Getenv("QM_TLS_CERT_FILE"), "serve HTTPS with this PEM certificate (read again when it changes; env QM_TLS_CERT_FILE)")
	f.StringVar(&tlsFiles.KeyFile, "tls-key-file", os.Getenv("QM_TLS_KEY_FILE"), "the certificate's PEM key (env QM_TLS_KEY_FILE)")
	f.StringVar(&tlsFiles.ClientCAFile, "tls-client-ca-file", os.Getenv("QM_TLS_CLIENT_CA_FILE"), "accept OSB clients with a certificate from these PEM CAs instead of basic auth (env QM_TLS_CLIENT_CA_FILE)")
	return cmd
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of qm and of the libraries it was built with",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				fmt.Fprintln(cmd.OutOrStdout(), "qm (no build information)")
				return
			}
			fmt.Fprintf(cmd.OutOrStdout(), "qm %s (%s)\n", info.Main.Version, info.GoVersion)
			for _, dep := range info.Deps {
				switch dep.Path {
				case "go.temporal.io/sdk", "sigs.k8s.io/controller-runtime", "k8s.io/client-go":
					fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", dep.Path, dep.Version)
				}
			}
		},
	}
}

// run connects to the cluster named by --kubeconfig (or the pod's) and,
// when withTemporal is set, to Temporal, then runs the components o names
// until ctx is done.
func (g *globals) run(ctx context.Context, withTemporal bool, o system.Options) error {
	cfg, err := kubeConfig(g.kubeconfig)
	if err != nil {
		return err
	}
	o.Kube = cfg
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
			o.Watcher.TemporalAddress = opts.HostPort
		}
		if o.Worker {
			o.TemporalNamespace = opts.Namespace
		}
	}
	return system.Run(ctx, o)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
