package api

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the API's Prometheus metrics, per route pattern (never the
// raw path: IDs would make a series per instance) and status code.
type metrics struct {
	gatherer *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{
		gatherer: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_api_requests_total",
			Help: "HTTP requests served, by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qm_api_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by method and route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10), // 0.5 ms to ~2 min
		}, []string{"method", "route"}),
	}
	m.gatherer.MustRegister(m.requests, m.duration,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{Registry: m.gatherer})
}

// observe logs one structured line per request and counts it. It logs the
// method, route, path, status, size, duration and the OSB request identity;
// never headers or bodies, which carry credentials.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		elapsed := time.Since(start)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		method := methodLabel(r.Method)
		s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
		s.metrics.duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		if route == "/healthz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		s.Logger.LogAttrs(r.Context(), level, "request",
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Int("bytes", ww.BytesWritten()),
			slog.Duration("duration", elapsed), slog.String("requestIdentity", r.Header.Get(requestIdentityHeader)),
			slog.String("remote", r.RemoteAddr))
	})
}

// methodLabel is the method as the metrics label it: one of the methods
// HTTP defines, or "other". The label is counted before authentication,
// from whatever the client sent: with the method as it came, each made-up
// one added series (500 unauthenticated requests added 7,000), until the
// API's memory and Prometheus gave out.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}
