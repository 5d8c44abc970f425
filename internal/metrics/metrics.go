// Package metrics is what an operator graphs and alerts on about the fleet:
// operations by outcome and duration, health checks run, and the state of
// every kind of resource Quartermaster keeps. docs/metrics.md lists the names
// and labels; the chart's dashboard and alerts query them.
//
// Counters of events (an operation ended, a check ran) count in the
// process that saw the event, as Prometheus expects: they live in
// controller-runtime's registry, which the worker serves. Gauges of state
// are never counted in memory: Fleet computes them from the watcher's
// caches on each scrape, so they hold the resources' counts after any
// restart. Labels are IDs of plans and services, namespaces and states,
// never an instance's or a binding's name: a series per instance would
// grow with the fleet.
package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The outcomes an operation ends with (the label outcome).
const (
	Succeeded = "succeeded"
	Failed    = "failed"
	// TimedOut: the plan's maximum_polling_duration passed first.
	TimedOut = "timeout"
)

// KindTimeout is the failure kind of an operation that timed out; it has
// outcome TimedOut rather than Failed.
const KindTimeout = "Timeout"

// Operation labels one operation for the counters: which, and of which
// plan. Plan and Service are empty when the operation failed before its
// plan could be read (an unknown plan).
type Operation struct {
	Operation, Service, Plan string
}

// operationBuckets span an operation that ends in its first step (a second
// or less) to one that waits out a plan's default maximum_polling_duration
// of an hour.
var operationBuckets = []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// checkBuckets span a TCP dial on the loopback to a container check's Job.
var checkBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

var (
	operationsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_operations_started_total",
		Help: "Operations (provision, update, deprovision, bind, unbind) that began, by plan.",
	}, []string{"operation", "service", "plan"})
	operationsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_operations_ended_total",
		Help: "Operations that ended, by plan, outcome (succeeded, failed, timeout) and failure kind (TemplateError, StatusFailed, …; empty when succeeded).",
	}, []string{"operation", "service", "plan", "outcome", "kind"})
	operationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "qm_operation_duration_seconds",
		Help:    "Time from an operation's request (its run's start) to its end, by plan and outcome.",
		Buckets: operationBuckets,
	}, []string{"operation", "service", "plan", "outcome"})
	healthChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_health_checks_total",
		Help: "Health checks of registered services that ended, by kind (tcp, http, container) and result (Succeeded, Failed, Unknown).",
	}, []string{"kind", "result"})
	healthCheckDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "qm_health_check_duration_seconds",
		Help:    "Time a health check took, by kind; a container check's from its Job's start to its end.",
		Buckets: checkBuckets,
	}, []string{"kind"})
	runsReestablished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_runs_reestablished_total",
		Help: "Runs that Temporal no longer had and the watcher started again from their resources, by kind: long-lived runs (health-check and drift-check shards, claim allocators, claims, binding usages, ServiceBindings, credential rotations, automatic mass updates) and operations whose resource says they are under way (instance and binding operations).",
	}, []string{"kind"})
	rotations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_rotations_total",
		Help: "Scheduled and forced rotations of binding credentials, by plan and outcome (succeeded, failed: the old credentials stay).",
	}, []string{"service", "plan", "outcome"})
	driftFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_drift_total",
		Help: "Instances found drifted by a drift check (an object of theirs deleted, or a field their last operation applied changed), by action: report (counted when the drift is first seen or changes) or repair (counted per Repair run started).",
	}, []string{"action"})
	appliesSuperseded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_applies_superseded_total",
		Help: "Applies that the fence kept out because a newer generation's apply had overtaken them (a worker that was paused or cut off and went on), by kind of resource (SFServiceInstance, SFServiceBinding).",
	}, []string{"kind"})
)

// collectors are what every process registers on controller-runtime's
// registry, which the worker's and the watcher's /metrics serve.
var collectors = []prometheus.Collector{operationsStarted, operationsEnded, operationDuration, healthChecks, healthCheckDuration,
	runsReestablished, appliesSuperseded, rotations, served, driftFound}

func init() {
	ctrlmetrics.Registry.MustRegister(collectors...)
}

// Collectors are the collectors init registers: every metric family the
// worker and the watcher serve, whether or not a series of it exists yet.
func Collectors() []prometheus.Collector { return slices.Clone(collectors) }

// OperationStarted counts an operation that began.
func OperationStarted(op Operation) {
	operationsStarted.WithLabelValues(op.Operation, op.Service, op.Plan).Inc()
}

// OperationEnded counts an operation that ended after took; kind is the
// failure's kind, empty when it succeeded.
func OperationEnded(op Operation, kind string, took time.Duration) {
	outcome := Outcome(kind)
	operationsEnded.WithLabelValues(op.Operation, op.Service, op.Plan, outcome, kind).Inc()
	operationDuration.WithLabelValues(op.Operation, op.Service, op.Plan, outcome).Observe(took.Seconds())
}

// Outcome is the outcome of an operation that ended with a failure of
// kind (empty: none).
func Outcome(kind string) string {
	switch kind {
	case "":
		return Succeeded
	case KindTimeout:
		return TimedOut
	default:
		return Failed
	}
}

// HealthCheckRan counts one health check of a registered service.
func HealthCheckRan(kind, result string, took time.Duration) {
	healthChecks.WithLabelValues(kind, result).Inc()
	if took > 0 {
		healthCheckDuration.WithLabelValues(kind).Observe(took.Seconds())
	}
}

// DriftFound counts an instance found drifted, by the action its plan
// asks for.
func DriftFound(action string) {
	driftFound.WithLabelValues(action).Inc()
}

// RunReestablished counts a long-lived run of kind (loops.Claim, …) that
// was missing from Temporal and was started again.
func RunReestablished(kind string) {
	runsReestablished.WithLabelValues(kind).Inc()
}

// ApplySuperseded counts an apply to a resource of kind that the fence
// refused: a stale worker's, which wrote nothing.
func ApplySuperseded(kind string) {
	appliesSuperseded.WithLabelValues(kind).Inc()
}

// Rotated counts a rotation of a binding's credentials of the plan, by
// outcome (Succeeded, Failed).
func Rotated(service, plan, outcome string) {
	rotations.WithLabelValues(service, plan, outcome).Inc()
}
