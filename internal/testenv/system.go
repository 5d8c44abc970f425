package testenv

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	restclient "k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/renderproc"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/temporalcluster"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/starter"
)

// The IDs of the samples that `qm dev` installs, and a System with
// Parts.Sample.
const (
	TenantService   = "6f3c1f8e-4c5e-4a55-9b53-6f1d2b7a9c01"
	TenantPlan      = "0a7b4a4e-2d0e-4f3e-8a53-3e1f0c7d5b11"
	KeyValueService = "3d7c2b9a-8f1e-4b6d-9c3a-5e2f1a0b7c42"
	KeyValuePlan    = "8a1e4c6f-2b3d-4e5f-9a7b-1c2d3e4f5a61"
)

// Credentials of the API a System serves.
var (
	OSBCredentials   = api.Credentials{Username: "platform", Password: "s3cr3t-pw"}
	AdminCredentials = api.Credentials{Username: "operator", Password: "admin-pw"}
)

// Parts says which of Quartermaster's components a System runs.
type Parts struct {
	// Worker runs a Temporal worker; Watcher the watcher; API the OSB and
	// admin API for the System's namespace.
	Worker, Watcher, API bool
	// Concurrency is the watcher's reconciles at once per kind (0: its default).
	Concurrency int
	// ClusterProbePeriod is how often the watcher probes SFClusters (0: its default).
	ClusterProbePeriod time.Duration
	// FileTemporal gives the System a dev server of its own with SQLite in a
	// file, as `qm dev` runs it, for benchmarks whose figures should be
	// those of the embedded default. Otherwise it shares the test binary's.
	FileTemporal bool
	// Namespace, when set, is the System's namespace, and no service is
	// registered in it; otherwise the System gets a new namespace with a
	// service of its own.
	Namespace string
	// ServiceID names the service of the plans Plan registers, with Namespace.
	ServiceID string
	// SyncTimeout and BindTimeout are the API's (default 20 s each).
	SyncTimeout, BindTimeout time.Duration
	// APILogger receives the API's request log (default: the test's output).
	APILogger *slog.Logger
	// Bare runs the System on BareKubernetes, the API server alone,
	// instead of the full cluster.
	Bare bool
	// HealthCheckMinute is the length of a health check's minute for the
	// worker (default: a minute).
	HealthCheckMinute time.Duration
	// Sample installs the samples of `qm dev` first (TenantService,
	// TenantPlan, KeyValueService, KeyValuePlan).
	Sample bool
	// Scheduler is the worker's (default: the one cluster).
	Scheduler scheduling.Scheduler
	// SuggestContinueAsNewAt gives the System a dev server of its own on
	// which Temporal suggests continue-as-new to every run whose history
	// has this many events, as it does at 4,096 events in production. It is
	// the one way tests make a long-running workflow continue as new on the
	// real server (the Temporal test suite's is SetContinueAsNewSuggested).
	SuggestContinueAsNewAt int
	// Metrics has the worker and the watcher serve /metrics, on
	// WorkerMetrics and WatcherMetrics (the API serves its own at URL).
	Metrics bool
	// TemporalCluster gives the System a Temporal cluster of its own
	// (TemporalCluster): PostgreSQL and each of Temporal's services a
	// process, as production runs it.
	TemporalCluster bool
	// Temporal runs the System on a Temporal the test started itself
	// (NewLosableTemporal's).
	Temporal client.Client
	// LoopCheckPeriod is how often the watcher looks for lost long-lived
	// runs (0: its default).
	LoopCheckPeriod time.Duration
	// Watched, when set, are the only namespaces the components watch,
	// with the System's catalog: a benchmark's cases each on a system of
	// their own, blind to what the cases before them left.
	Watched []string
	// APILimits are the API's limits, with API.
	APILimits api.Limits
	// RenderTimeout is the worker's --render-timeout (0: its default).
	RenderTimeout time.Duration
	// WorkerTransport wraps the worker's transport to the API server: a
	// benchmark sees there what its runs ask of it, and how long each
	// request takes.
	WorkerTransport func(http.RoundTripper) http.RoundTripper
	// Parallel runs the test beside the package's other parallel tests
	// (Start calls t.Parallel): the System keeps to its namespace and
	// "default" (the samples') and has a Temporal namespace of its own
	// (OwnTemporalNamespace), so that no other test's watcher or worker
	// acts on what it makes. A test that writes in other namespaces, edits
	// what is in "default", or reads process-wide figures (Metrics) stays
	// serial.
	Parallel bool
}

// System is Quartermaster running on the shared API server and dev server,
// wired as `qm dev` wires it (internal/system), in a namespace of the
// test's own. The worker runs apart from the rest, so that a test can stop
// it and start another.
type System struct {
	t        testing.TB
	Kube     *Cluster
	Temporal client.Client
	// TemporalCluster is the System's own cluster, with Parts.TemporalCluster.
	TemporalCluster *temporalcluster.Cluster
	Namespace       string
	// ServiceID is the OSB service_id of the namespace's service: the
	// service of every plan that Plan registers.
	ServiceID string
	// API is the API server when Parts.API is set; URL is where it serves
	// the OSB API, AdminURL the admin API, and APIMetrics the URL of its
	// /metrics.
	API                       *api.Server
	URL, AdminURL, APIMetrics string
	// Client, when set, sends the System's requests to URL: one that
	// trusts the certificate of an API served over TLS.
	Client *http.Client

	// WorkerMetrics and WatcherMetrics are the URLs of the worker's and
	// the watcher's /metrics, with Parts.Metrics.
	WorkerMetrics, WatcherMetrics string

	worker, rest *system.System
	// workerTemporal and workerProbes serve the worker's metrics.
	workerTemporal client.Client
	workerProbes   *telemetry.Server
	restOptions    system.Options
	minute         time.Duration
	scheduler      scheduling.Scheduler
	renderBounds   plan.Bounds
	// workerKube is the worker's configuration (Parts.WorkerTransport).
	workerKube *restclient.Config
	// watched are the only namespaces the components watch (Parts.Parallel).
	watched []string
}

// Start runs the parts of Quartermaster that parts names until the test ends.
func Start(t testing.TB, parts Parts) *System {
	t.Helper()
	if p, ok := t.(interface{ Parallel() }); ok && parts.Parallel {
		p.Parallel()
	}
	s := &System{t: t, Namespace: parts.Namespace, ServiceID: parts.ServiceID, minute: parts.HealthCheckMinute, scheduler: parts.Scheduler,
		renderBounds: plan.Bounds{Timeout: parts.RenderTimeout}}
	if parts.Bare {
		s.Kube = BareKubernetes(t)
	} else {
		s.Kube = Kubernetes(t)
	}
	s.workerKube = s.Kube.Config
	if parts.WorkerTransport != nil {
		s.workerKube = restclient.CopyConfig(s.Kube.Config)
		s.workerKube.Wrap(parts.WorkerTransport)
	}
	switch {
	case parts.Temporal != nil:
		s.Temporal = parts.Temporal
	case parts.TemporalCluster:
		s.TemporalCluster = TemporalCluster(t)
		s.Temporal = s.TemporalCluster.Client()
	case parts.FileTemporal:
		s.Temporal = FileTemporal(t)
	case parts.SuggestContinueAsNewAt > 0:
		s.Temporal = ownTemporal(t, devserver.Options{Env: ServerEnv, DynamicConfig: map[string]string{
			"limit.historyCount.suggestContinueAsNew": strconv.Itoa(parts.SuggestContinueAsNewAt)}})
	case parts.Parallel && (parts.Worker || parts.Watcher):
		s.Temporal, _ = OwnTemporalNamespace(t)
	case parts.Worker || parts.Watcher:
		s.Temporal = Temporal(t)
	}
	if s.Namespace == "" {
		s.Namespace = s.Kube.Namespace(t)
		s.ServiceID = s.Namespace + "-svc"
		s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {name: svc, namespace: %s}
spec:
  name: %s
  id: %s
  description: a service of the test
  bindable: true
  instancesRetrievable: true
  bindingsRetrievable: true
  planUpdatable: true`, s.Namespace, s.Namespace, s.ServiceID))
	}
	if parts.Parallel || len(parts.Watched) > 0 {
		s.watched = append(s.Catalog().Catalog, parts.Watched...)
	}
	if parts.Sample {
		s.installSample()
	}
	if parts.Metrics {
		s.serveWorkerMetrics()
	}
	if parts.Worker {
		s.StartWorker()
	}
	o := system.Options{Kube: s.Kube.Config, Catalog: s.Catalog(), Temporal: s.Temporal, Namespaces: s.watched}
	if parts.Watcher {
		o.Watcher = &starter.WatcherOptions{Concurrency: parts.Concurrency, ClusterProbePeriod: parts.ClusterProbePeriod,
			LoopCheckPeriod: parts.LoopCheckPeriod}
		if s.TemporalCluster != nil {
			// As `qm watcher` does on a cluster.
			o.Watcher.TemporalNamespace = "default"
		}
		if parts.Metrics {
			o.Watcher.MetricsAddr = FreeAddr(t)
			s.WatcherMetrics = "http://" + o.Watcher.MetricsAddr + "/metrics"
		}
	}
	if parts.API {
		logger := parts.APILogger
		if logger == nil {
			logger = slog.New(slog.NewTextHandler(t.Output(), nil))
		}
		s.API = &api.Server{Namespace: s.Namespace, OSB: OSBCredentials, Admin: AdminCredentials,
			SyncTimeout: cmp.Or(parts.SyncTimeout, 20*time.Second), BindTimeout: cmp.Or(parts.BindTimeout, 20*time.Second), Logger: logger,
			Limits: parts.APILimits}
		var ls api.Listeners
		for _, ln := range []*net.Listener{&ls.OSB, &ls.Admin, &ls.Metrics} {
			var err error
			*ln, err = net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
		}
		o.API, o.APIListeners = s.API, ls
		s.URL, s.AdminURL = "http://"+ls.OSB.Addr().String(), "http://"+ls.Admin.Addr().String()
		s.APIMetrics = "http://" + ls.Metrics.Addr().String() + "/metrics"
	}
	if o.Watcher != nil || o.API != nil {
		s.restOptions = o
		s.rest = s.run(o)
	}
	return s
}

// Catalog is the System's trust boundary: its namespace is the catalog,
// as the chart's release namespace is, and "default", where the samples
// are (installSample), as under `make run`; every other is a tenant's.
func (s *System) Catalog() tenancy.Boundary {
	return tenancy.Boundary{Catalog: []string{s.Namespace, "default"}}
}

// Over returns a System of no components of its own over a cluster the
// test started itself (the chaos run's), for the helpers that register
// services and plans.
func Over(t testing.TB, kube *Cluster, namespace, serviceID string) *System {
	return &System{t: t, Kube: kube, Namespace: namespace, ServiceID: serviceID}
}

// run starts components until the test ends; the test fails if one of them
// stops with an error.
func (s *System) run(o system.Options) *system.System {
	s.t.Helper()
	sys, err := system.Start(context.Background(), o)
	if err != nil {
		// CI keeps no more than the test's output: say whether the
		// shared server is still there (a package's tests, all at once,
		// once failed to reach it).
		if state := SharedTemporalState(); state != "" {
			s.t.Log(state)
		}
	}
	require.NoError(s.t, err, "starting Quartermaster")
	s.t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			s.t.Errorf("Quartermaster stopped: %v", err)
		}
	})
	return sys
}

// StartWorker starts a worker, with a Kubernetes client of its own as
// `qm worker` has.
func (s *System) StartWorker() {
	s.t.Helper()
	o := system.Options{Kube: s.workerKube, Catalog: s.Catalog(), Temporal: cmp.Or(s.workerTemporal, s.Temporal), Worker: true,
		HealthCheckMinute: s.minute, Scheduler: s.scheduler, Probes: s.workerProbes, Namespaces: s.watched, WorkerDeadlockTimeout: DeadlockTimeout,
		Renderer: renderers, RenderBounds: s.renderBounds}
	if s.TemporalCluster != nil {
		// As `qm worker` does: a cluster's namespace gets the search
		// attributes from the worker.
		o.TemporalNamespace = "default"
	}
	s.worker = s.run(o)
}

// serveWorkerMetrics has the worker serve /metrics as `qm worker` does:
// Quartermaster's and controller-runtime's registry, and the Temporal
// SDK's metrics of a client of its own (the test binary's shared client
// records none, and a registry takes the SDK's metrics once).
func (s *System) serveWorkerMetrics() {
	reg := prometheus.NewRegistry()
	handler, err := telemetry.TemporalMetrics(reg, slog.Default())
	require.NoError(s.t, err)
	tc, err := client.NewClientFromExisting(s.Temporal, client.Options{MetricsHandler: handler, Logger: log.NewStructuredLogger(slog.Default())})
	require.NoError(s.t, err)
	s.t.Cleanup(tc.Close)
	addr := FreeAddr(s.t)
	s.workerTemporal = tc
	s.workerProbes = &telemetry.Server{MetricsAddr: addr, Gatherer: prometheus.Gatherers{ctrlmetrics.Registry, reg}}
	s.WorkerMetrics = "http://" + addr + "/metrics"
}

// StartAnotherWorker starts one more worker beside the System's, on the
// same task queue, with state of its own (caches, scheduling turns) as a
// second replica of `qm worker` has; it stops when the test ends.
func (s *System) StartAnotherWorker() {
	s.t.Helper()
	s.run(system.Options{Kube: s.workerKube, Catalog: s.Catalog(), Temporal: s.Temporal, Worker: true, HealthCheckMinute: s.minute, Scheduler: s.scheduler,
		Namespaces: s.watched, WorkerDeadlockTimeout: DeadlockTimeout, Renderer: renderers, RenderBounds: s.renderBounds})
}

// renderers are the render processes of every worker of the test binary
// (system.Options.Renderer): a test binary takes over a second to start as
// one, so they are started once and shared, and end with the binary.
var renderers = &renderproc.Pool{}

// RestartWatcher stops the watcher (and the API, if the System has it) and
// starts them again, as a new process would.
func (s *System) RestartWatcher() {
	s.t.Helper()
	require.NoError(s.t, s.rest.Stop())
	// The API closed its listeners as it stopped: the new ones listen where
	// the old did, so that s.URL and the others hold.
	ls := &s.restOptions.APIListeners
	for _, ln := range []*net.Listener{&ls.OSB, &ls.Admin, &ls.Metrics} {
		if *ln == nil {
			continue
		}
		again, err := net.Listen("tcp", (*ln).Addr().String())
		require.NoError(s.t, err, "listening again for the API")
		*ln = again
	}
	s.rest = s.run(s.restOptions)
}

// StopWorker stops the worker: nothing moves until StartWorker.
func (s *System) StopWorker() {
	s.t.Helper()
	require.NoError(s.t, s.worker.Stop())
}
