// Package telemetry gives a qm process what an orchestrator and a
// monitoring system look at: the Temporal SDK's metrics in Prometheus form,
// and a small server of /healthz, /readyz and /metrics for the components
// that have no such server of their own (the worker; the watcher has
// controller-runtime's, the API serves them on its own port).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// Server serves /healthz (the process runs), /readyz (it can do its work)
// and /metrics.
type Server struct {
	// HealthAddr serves the probes; empty or "0" serves none.
	HealthAddr string
	// MetricsAddr serves /metrics; empty or "0" serves none. It may equal
	// HealthAddr.
	MetricsAddr string
	// Ready reports why the process cannot do its work, or nil.
	Ready func(context.Context) error
	// Gatherer holds the metrics to serve.
	Gatherer prometheus.Gatherer
	// Logger receives what the probes report, once per change.
	Logger *slog.Logger
}

// readyTimeout bounds one readiness check, well under a kubelet's default
// probe timeout of one second plus its period.
const readyTimeout = 3 * time.Second

// latencyBuckets span a local activity (1 ms) to a long poll (a minute).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// TemporalMetrics returns a handler that records the Temporal SDK's metrics
// (workflow and activity task latencies, poll counts, schedule-to-start
// times, …) into reg, for client.Options.MetricsHandler. Call it once per
// registry.
func TemporalMetrics(reg prometheus.Registerer, logger *slog.Logger) (client.MetricsHandler, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("creating the Prometheus exporter of Temporal's metrics: %w", err)
	}
	// The SDK's latencies are in seconds; OpenTelemetry's default buckets
	// (0 to 10000) are for milliseconds and would put every one in the first.
	seconds := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}})
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(seconds))
	return temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: provider.Meter("temporal-sdk-go"),
		// Counters as Prometheus counters (_total), not gauges.
		UseMonotonicCounters: true,
		// The handler's default panics; a metric is never worth a worker.
		OnError: func(err error) { logger.Warn("recording a Temporal metric", "error", err) },
	}), nil
}

// TemporalReachable is a readiness check: Temporal's frontend answers its
// health check.
func TemporalReachable(tc client.Client, address string) func(context.Context) error {
	return func(ctx context.Context) error {
		if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			return fmt.Errorf("the Temporal frontend at %s does not answer: %w", address, err)
		}
		return nil
	}
}

// Run serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
		}
		return muxes[addr]
	}
	if on(s.HealthAddr) {
		m := mux(s.HealthAddr)
		m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		m.Handle("GET /readyz", s.readyz())
	}
	if on(s.MetricsAddr) {
		mux(s.MetricsAddr).Handle("GET /metrics", promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{}))
	}
	errs := make(chan error, len(muxes))
	for addr, m := range muxes {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listening on %s for the probes and metrics: %w", addr, err)
		}
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
		go func() { errs <- srv.Serve(ln) }()
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
	}
	for range muxes {
		if err := <-errs; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving the probes and metrics: %w", err)
		}
	}
	return nil
}

// readyz answers 200 while Ready passes, and 503 with the reason otherwise;
// the reason is logged when it changes, not on every probe.
func (s *Server) readyz() http.Handler {
	last := make(chan string, 1)
	last <- ""
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if s.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			err = s.Ready(ctx)
			cancel()
		}
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		if prev := <-last; prev != reason && s.Logger != nil {
			if err != nil {
				s.Logger.Warn("not ready", "reason", reason)
			} else {
				s.Logger.Info("ready again")
			}
		}
		last <- reason
		if err != nil {
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

func on(addr string) bool { return addr != "" && addr != "0" }
