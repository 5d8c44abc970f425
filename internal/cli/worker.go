package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/worker"
)

func newWorkerCommand(g *globals) *cobra.Command {
	var hosts []string
	var minute, stopTimeout, deadlockTimeout time.Duration
	var bounds plan.Bounds
	var scheduler scheduling.Scheduler
	var versioned worker.Versioning
	var renderProcesses int
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
			if versioned.Enabled() {
				if err := versioned.Check(); err != nil {
					return err
				}
			}
			return g.run(cmd.Context(), true, system.Options{WorkerVersioning: versioned, Worker: true, TemplateHosts: hosts, RenderBounds: bounds, RenderProcesses: renderProcesses, HealthCheckMinute: minute, Probes: probes, Scheduler: scheduler,
				WorkerStopTimeout: stopTimeout, WorkerDeadlockTimeout: deadlockTimeout})
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
	f.Int64Var(&bounds.MaxMemory, "render-max-memory", plan.DefaultRenderMaxMemory, "bytes the functions of one render may make (strings, lists), checked before each call; a render process whose heap grows past four times this is stopped")
	f.IntVar(&renderProcesses, "render-processes", 0, "most templates rendered at once, each in a render process of its own that is stopped when it passes the render bounds (0: four per CPU)")
	f.DurationVar(&minute, "healthcheck-minute", time.Minute, healthCheckMinuteUsage)
	f.DurationVar(&stopTimeout, "stop-timeout", worker.DefaultStopTimeout,
		"on SIGTERM, how long the worker lets the tasks in hand finish after it stops polling; keep it below the pod's terminationGracePeriodSeconds")
	f.DurationVar(&deadlockTimeout, "deadlock-timeout", envDuration("QM_DEADLOCK_TIMEOUT"),
		"how long workflow code may run without yielding before its task fails as deadlocked (env QM_DEADLOCK_TIMEOUT); 0: the Temporal SDK's 1s. Raise it where the worker's CPU is throttled or shared")
	schedulerFlag(f, &scheduler)
	deploymentFlag(f, &versioned.Deployment)
	f.StringVar(&versioned.BuildID, "build-id", os.Getenv("QM_BUILD_ID"),
		"this release's build in the worker deployment (env QM_BUILD_ID; the chart sets the image's tag); empty: unversioned, the worker takes every run")
	f.IntVar(&versioned.Revision, "release-revision", envInt("QM_RELEASE_REVISION"),
		"the release revision the worker runs for (env QM_RELEASE_REVISION; the chart's): a newer one than any before makes its build current at start; 0: only the deployment's first start does")
	f.DurationVar(&versioned.DrainTimeout, "drain-timeout", worker.DefaultDrainTimeout,
		"on SIGTERM, how long a versioned worker whose build is no longer current serves the runs pinned to it; keep it and --stop-timeout below terminationGracePeriodSeconds")
	return cmd
}

// envDuration reads a duration from the environment (0 when unset or
// not a duration).
func envDuration(key string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(key))
	return d
}

// envInt reads a whole number from the environment (0 when unset or not
// a number).
func envInt(key string) int {
	n, _ := strconv.Atoi(os.Getenv(key))
	return n
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
