package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	var resp *http.Response
	require.Eventually(t, func() bool {
		var err error
		resp, err = http.Get(url)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "GET %s", url)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestWorkerProbesFollowTemporal: the worker's readiness is Temporal's
// reachability, with the address in the reason; its metrics are the
// Temporal SDK's, recorded through the Prometheus handler.
func TestWorkerProbesFollowTemporal(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.TemporalMetrics(reg, slog.Default())
	require.NoError(t, err)
	address := testenv.TemporalAddress(t)
	up, err := client.DialContext(context.Background(), client.Options{HostPort: address, MetricsHandler: metrics})
	require.NoError(t, err)
	defer up.Close()
	down, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer down.Close()

	cases := []struct {
		name      string
		tc        client.Client
		address   string
		wantReady int
		wantBody  string
	}{
		{"temporal answers", up, address, http.StatusOK, "ok\n"},
		{"temporal is unreachable", down, "127.0.0.1:1", http.StatusServiceUnavailable, "the Temporal frontend at 127.0.0.1:1 does not answer: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			health, metricsAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			srv := &telemetry.Server{HealthAddr: health, MetricsAddr: metricsAddr, Gatherer: reg,
				Ready: telemetry.TemporalReachable(c.tc, c.address), Logger: slog.Default()}
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			defer func() {
				cancel()
				assert.NoError(t, <-done, "the server stops cleanly")
			}()

			status, body := get(t, "http://"+health+"/healthz")
			assert.Equal(t, http.StatusOK, status, "the process lives whatever Temporal does")
			assert.Equal(t, "ok\n", body)
			status, body = get(t, "http://"+health+"/readyz")
			assert.Equal(t, c.wantReady, status)
			assert.True(t, strings.HasPrefix(body, c.wantBody), "readyz says %q", body)
			status, _ = get(t, "http://"+health+"/metrics")
			assert.Equal(t, http.StatusNotFound, status, "metrics are on their own address")
		})
	}

	// A call through the client shows in the served metrics.
	_, err = up.DescribeWorkflowExecution(context.Background(), "no-such-workflow", "")
	require.Error(t, err)
	addr := testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = (&telemetry.Server{MetricsAddr: addr, Gatherer: reg}).Run(ctx) }()
	status, body := get(t, "http://"+addr+"/metrics")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `operation="DescribeWorkflowExecution"`, "the SDK counts its requests")
	assert.Contains(t, body, "# TYPE temporal_request_total counter\n", "the SDK counts its requests")
	assert.Regexp(t, `temporal_request_failure_total\{[^}]*operation="DescribeWorkflowExecution",status_code="NOT_FOUND"[^}]*\} 1\n`, body, "and their failures")
	assert.Regexp(t, `temporal_request_latency_seconds_bucket\{[^}]*le="0\.25"\} 1\n`, body, "latencies in seconds, in buckets for seconds")
}

// TestServerRefusesABusyAddress: a taken port is a clear error, not a
// silent process without probes.
func TestServerRefusesABusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = (&telemetry.Server{HealthAddr: ln.Addr().String()}).Run(context.Background())
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "listening on "+ln.Addr().String()+" for the probes and metrics: "), err.Error())
	assert.NotErrorIs(t, err, http.ErrServerClosed)
}
