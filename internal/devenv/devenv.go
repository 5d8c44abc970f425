// Package devenv runs the whole of Quartermaster on one machine (`qm dev`,
// started by `make run`): a real Kubernetes control plane, the Temporal dev
// server with its Web UI, and the worker, watcher and API in one process.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/deploy/samples"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// Options configure `qm dev`.
type Options struct {
	// BinDir holds kube-apiserver, etcd and temporal.
	BinDir string
	// DataDir keeps etcd's data, Temporal's SQLite file, the kubeconfig and logs.
	DataDir string
	// KubePort is the embedded API server's port.
	KubePort int
	// TemporalPort and UIPort are the embedded Temporal frontend and Web UI ports.
	TemporalPort, UIPort int
	// MetricsPort serves the process's /metrics on the loopback: the
	// worker's and the watcher's (operations, health checks, the fleet's
	// state gauges); 0 serves none. The API serves its own on
	// APIMetricsListen.
	MetricsPort int
	// TemporalMetrics, when set, records the embedded dev server's client's
	// metrics (the workers' pollers, task latencies); a Temporal of Options.
	// Temporal records its own as it was dialled.
	TemporalMetrics client.MetricsHandler
	// Listen, AdminListen and APIMetricsListen are the listen addresses of
	// the OSB API, the admin API and the API's metrics; "" serves no admin
	// API or no API metrics.
	Listen, AdminListen, APIMetricsListen string
	// Listeners, where set, are the API's listeners, open already: the
	// addresses are then only what the banner shows.
	Listeners api.Listeners
	// Kubeconfig, when set, names an existing cluster to use instead of the embedded one.
	Kubeconfig string
	// Temporal, when set, dials an existing Temporal to use instead of the
	// dev server (qm dials it as it dials for every command, from the
	// client configuration), and TemporalAddress says where it is.
	Temporal        func(context.Context) (client.Client, error)
	TemporalAddress string
	// Namespace is the Temporal namespace.
	Namespace string
	// Out receives what a person at the terminal reads.
	Out io.Writer
	// Logger receives the components' logs.
	Logger *slog.Logger
	// HealthCheckMinute is how long a health check's minute lasts
	// (system.Options.HealthCheckMinute).
	HealthCheckMinute time.Duration
	// Scheduler chooses the cluster of each new instance (system.Options.Scheduler).
	Scheduler scheduling.Scheduler
}

// Run starts everything, prints where to find it, and stops everything when
// ctx is done. It returns early with an error naming what could not start.
func Run(ctx context.Context, o Options) error {
	if err := os.MkdirAll(filepath.Join(o.DataDir, "logs"), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.DataDir, err)
	}

	// What a killed qm dev left running goes first: its servers die with it,
	// but may still hold their ports a moment after it.
	for _, pids := range []string{filepath.Join(o.DataDir, "cluster", "pids"), filepath.Join(o.DataDir, "temporal", "pids")} {
		killed, err := childproc.Cleanup(pids, o.BinDir)
		if err != nil {
			return err
		}
		if len(killed) > 0 {
			fmt.Fprintf(o.Out, "Stopped what an earlier qm dev left running: %s\n", strings.Join(killed, ", "))
		}
	}

	// Fail before starting anything if a fixed port is taken: the messages of
	// the child processes would be far less clear.
	apiLns, err := o.apiListeners()
	if err != nil {
		return err
	}
	defer apiLns.close()
	apiLn := apiLns.OSB
	if o.Kubeconfig == "" {
		if err := portFree(o.KubePort, "Kubernetes API server"); err != nil {
			return err
		}
	}
	if o.Temporal == nil {
		if err := portFree(o.TemporalPort, "Temporal frontend"); err != nil {
			return err
		}
		if err := portFree(o.UIPort, "Temporal Web UI"); err != nil {
			return err
		}
	}

	var probes *telemetry.Server
	if o.MetricsPort != 0 {
		if err := portFree(o.MetricsPort, "metrics"); err != nil {
			return err
		}
		probes = &telemetry.Server{MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.MetricsPort)), Gatherer: ctrlmetrics.Registry}
	}

	kubeCfg, kubeconfigPath, stopKube, err := startKubernetes(o)
	if err != nil {
		return err
	}
	defer stopKube()

	sv := &supervisor{o: o}
	tc, uiURL, stopTemporal, err := startTemporal(ctx, o, sv)
	if err != nil {
		return err
	}
	defer stopTemporal()

	osb, err := credentials(o.DataDir, OSBCredentialsFile, "QM_OSB_USERNAME", "QM_OSB_PASSWORD", "qm")
	if err != nil {
		return err
	}
	admin, err := credentials(o.DataDir, AdminCredentialsFile, "QM_ADMIN_USERNAME", "QM_ADMIN_PASSWORD", "admin")
	if err != nil {
		return err
	}
	// A failed self-check stops the components too.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	sys, err := system.Start(runCtx, system.Options{
		Kube:              kubeCfg,
		Catalog:           tenancy.Boundary{Catalog: []string{SampleNamespace}},
		Temporal:          tc,
		TemporalNamespace: o.Namespace,
		HealthCheckMinute: o.HealthCheckMinute,
		Scheduler:         o.Scheduler,
		Worker:            true,
		Watcher:           &starter.WatcherOptions{TemporalAddress: o.temporalAddress(), TemporalNamespace: o.Namespace},
		API:               &api.Server{Namespace: SampleNamespace, OSB: osb, Admin: admin, Logger: o.Logger},
		APIListeners:      apiLns.Listeners,
		Probes:            probes,
	})
	if err != nil {
		return err
	}
	// The sample services and plans, so that a new user can provision,
	// bind, unbind and deprovision at once.
	if err := samples.Install(ctx, sys.Kube, SampleNamespace, "qm-dev", samples.Installed); err != nil {
		_ = sys.Stop()
		return err
	}

	g, gctx := errgroup.WithContext(runCtx)
	g.Go(sys.Wait)
	g.Go(func() error {
		if err := sv.run(gctx); err != nil {
			stop()
			return err
		}
		return nil
	})
	g.Go(func() error {
		if _, err := selfCheck(gctx, tc); err != nil {
			stop()
			return err
		}
		kubectl := filepath.Join(o.BinDir, "kubectl")
		fmt.Fprintf(o.Out, "\nQuartermaster is running.\n\n")
		for _, line := range [][2]string{
			{"OSB API", "http://" + apiLn.Addr().String() + fmt.Sprintf(" (plain HTTP on loopback; user %s, password %s)", osb.Username, osb.Password)},
			{"", fmt.Sprintf("curl -u %s:%s -H 'X-Broker-API-Version: 2.17' http://%s/v2/catalog", osb.Username, osb.Password, apiLn.Addr())},
			{"admin API", adminLine(apiLns.Admin, admin)},
			{"mass update", massUpdateLine(apiLns.Admin, admin, filepath.Join(o.BinDir, "qm"), o.DataDir)},
			{"metrics", metricsLine(apiLns.Metrics, probes)},
			{"Temporal UI", uiURL},
			{"Temporal", fmt.Sprintf("%s (namespace %q, task queue %q)", o.temporalAddress(), o.Namespace, runs.TaskQueue)},
			{"Kubernetes", kubeCfg.Host},
			{"kubeconfig", kubeconfigPath},
			{"", "export KUBECONFIG=" + kubeconfigPath},
			{"", kubectl + " --kubeconfig " + kubeconfigPath + " get crds"},
			{"logs", filepath.Join(o.DataDir, "logs")},
			{"samples", "services key-value-store and tenant-namespace, plan small each; UsageKinds of the built-in workloads; ServiceClass key-value-stores (every key-value store is a claimable service)"},
			{"", kubectl + " --kubeconfig " + kubeconfigPath + " get sfservices,sfplans,serviceclasses -n " + SampleNamespace},
			{"", kubectl + " --kubeconfig " + kubeconfigPath + " get usagekinds"},
			{"nodes", "simulated by kwok: pods are scheduled and run, no container starts"},
			{"", kubectl + " --kubeconfig " + kubeconfigPath + " get nodes,pods -A"},
			{"self-check", "the worker sees every CRD established (workflow " + selfCheckID + ")"},
		} {
			fmt.Fprintf(o.Out, "  %-13s %s\n", line[0], line[1])
		}
		fmt.Fprintf(o.Out, "\nPress Ctrl-C to stop. State is kept in %s for the next start.\n", o.DataDir)
		return nil
	})

	err = g.Wait()
	fmt.Fprintln(o.Out, "\nStopping Quartermaster...")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (o Options) temporalAddress() string {
	if o.Temporal != nil {
		return o.TemporalAddress
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(o.TemporalPort))
}

// SampleNamespace is where `qm dev` installs the sample service and plan.
const SampleNamespace = "default"

// selfCheckID is the workflow ID of the start-up self-check; every start of
// qm dev runs it again under this ID, so the UI lists the runs together.
const selfCheckID = "selfcheck/qm-dev"

// selfCheck runs the SelfCheck workflow and fails unless the worker sees
// every Quartermaster CRD established.
func selfCheck(ctx context.Context, tc client.Client) (workflows.SelfCheckResult, error) {
	var res workflows.SelfCheckResult
	defs, err := crds.Definitions()
	if err != nil {
		return res, err
	}
	want := make([]string, 0, len(defs))
	for _, d := range defs {
		want = append(want, d.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                  selfCheckID,
		TaskQueue:           runs.TaskQueue,
		WorkflowTaskTimeout: runs.WorkflowTaskTimeout,
		// A run left over from a killed qm is joined rather than failed on.
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			runs.AttrKind.ValueSet("SelfCheck"),
			runs.AttrOperation.ValueSet("selfcheck"),
		),
	}, workflows.SelfCheck, want)
	if err != nil {
		return res, fmt.Errorf("starting the self-check workflow: %w", err)
	}
	if err := run.Get(ctx, &res); err != nil {
		return res, fmt.Errorf("self-check workflow %s: %w", run.GetID(), err)
	}
	if len(res.Missing) > 0 {
		return res, fmt.Errorf("self-check: the worker does not see these CRDs established: %v", res.Missing)
	}
	return res, nil
}

// metricsLine says where the Prometheus metrics are served.
func metricsLine(api net.Listener, probes *telemetry.Server) string {
	var lines []string
	if probes != nil {
		lines = append(lines, fmt.Sprintf("http://%s/metrics (operations, health checks, the fleet's state)", probes.MetricsAddr))
	}
	if api != nil {
		lines = append(lines, fmt.Sprintf("http://%s/metrics (the API's, with the mass updates')", api.Addr()))
	}
	if len(lines) == 0 {
		return "none (--metrics-port 0 and --api-metrics-listen \"\")"
	}
	return strings.Join(lines, " and ")
}

// adminLine says where the admin API is served.
func adminLine(ln net.Listener, admin api.Credentials) string {
	if ln == nil {
		return "off (--admin-listen \"\")"
	}
	return fmt.Sprintf("curl -u %s:%s http://%s/admin/instances", admin.Username, admin.Password, ln.Addr())
}

// massUpdateLine says how to run qm mass-update against the admin API.
func massUpdateLine(ln net.Listener, admin api.Credentials, qm, dataDir string) string {
	if ln == nil {
		return "off, with the admin API"
	}
	return fmt.Sprintf("%s mass-update list --url http://%s (QM_ADMIN_USERNAME=%s QM_ADMIN_PASSWORD=%s, or found in %s)",
		qm, ln.Addr(), admin.Username, admin.Password, dataDir)
}

// openListeners are the API's listeners, and which of them Run opened,
// to close.
type openListeners struct {
	api.Listeners
	opened []net.Listener
}

// apiListeners opens the API's listeners that o does not hold open
// already. A taken address fails here, before anything starts.
func (o Options) apiListeners() (openListeners, error) {
	ls := openListeners{Listeners: o.Listeners}
	for _, l := range []struct {
		ln   *net.Listener
		addr string
		what string
	}{{&ls.OSB, o.Listen, "the OSB API"}, {&ls.Admin, o.AdminListen, "the admin API"}, {&ls.Metrics, o.APIMetricsListen, "the API's metrics"}} {
		if *l.ln != nil || l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			ls.close()
			return openListeners{}, fmt.Errorf("%s cannot listen on %s (is another qm running?): %w", l.what, l.addr, err)
		}
		*l.ln = ln
		ls.opened = append(ls.opened, ln)
	}
	return ls, nil
}

func (ls openListeners) close() {
	for _, ln := range ls.opened {
		_ = ln.Close()
	}
}
