package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
)

// Load of the OSB benchmark: concurrent clients on loopback, each sending
// its next request as soon as the last one is answered.
const (
	loadClients  = 32
	loadDuration = 5 * time.Second // testenv.BenchWindow shortens it in a smoke run
	osbClients   = 16              // platforms provisioning in parallel
)

// BenchmarkOSB measures the OSB API as platforms load it, on the embedded
// default (envtest's API server, the dev server with SQLite in a file):
// GET /v2/catalog and GET .../last_operation requests/s and p99 latency
// under 32 concurrent clients, and provision-to-succeeded throughput of N
// instances (QM_BENCH_N, default 1000) provisioned with PUT and polled with
// last_operation by 16 clients. Run it with `make bench`.
func BenchmarkOSB(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s := testenv.Start(b, testenv.Parts{API: true, Worker: true, Watcher: true, Concurrency: 64, FileTemporal: true,
		APILogger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	planID := s.Plan("one-configmap", "  manager: {async: true}", testenv.Templates("one-configmap"))
	serviceID := s.ServiceID
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	call := func(method, path, body string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.SetBasicAuth(testenv.OSBCredentials.Username, testenv.OSBCredentials.Password)
		req.Header.Set("X-Broker-API-Version", "2.17")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		return resp.StatusCode, raw, err
	}
	provision := func(id string) error {
		status, body, err := call(http.MethodPut, "/v2/service_instances/"+id+"?accepts_incomplete=true",
			fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, serviceID, planID))
		if err == nil && status != http.StatusAccepted {
			err = fmt.Errorf("PUT %s: %d %s", id, status, body)
		}
		return err
	}
	state := func(id string) (string, error) {
		status, body, err := call(http.MethodGet, "/v2/service_instances/"+id+"/last_operation?operation=provision", "")
		if err != nil {
			return "", err
		}
		if status != http.StatusOK {
			return "", fmt.Errorf("last_operation of %s: %d %s", id, status, body)
		}
		var lo struct {
			State string `json:"state"`
		}
		return lo.State, json.Unmarshal(body, &lo)
	}

	// 1. Catalog and last_operation under load.
	require.NoError(b, provision("probe"))
	require.Eventually(b, func() bool { s, err := state("probe"); return err == nil && s == "succeeded" }, time.Minute, 20*time.Millisecond)
	catalogRate, catalogP99 := load(b, func() error {
		status, _, err := call(http.MethodGet, "/v2/catalog", "")
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("catalog: %d", status)
		}
		return err
	})
	lastOpRate, lastOpP99 := load(b, func() error { _, err := state("probe"); return err })

	// 2. N provisions through the OSB API.
	b.ResetTimer()
	start := time.Now()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("osb-%05d", i)
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make(chan error, osbClients)
	for range osbClients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := provision(ids[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	putDone := time.Since(start)
	close(errs)
	require.NoError(b, <-errs)
	// Poll until every instance reports succeeded; each client polls its
	// share of the pending instances in turn, as a platform's poller does.
	var mu sync.Mutex
	pending := slices.Clone(ids)
	var last time.Time
	deadline := time.Now().Add(10 * time.Minute)
	errs = make(chan error, osbClients)
	for c := range osbClients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				var mine []string
				for i := c; i < len(pending); i += osbClients {
					mine = append(mine, pending[i])
				}
				mu.Unlock()
				if len(mine) == 0 {
					return
				}
				for _, id := range mine {
					s, err := state(id)
					if err != nil {
						errs <- err
						return
					}
					if s == "succeeded" {
						mu.Lock()
						pending = slices.DeleteFunc(pending, func(p string) bool { return p == id })
						last = time.Now()
						mu.Unlock()
					} else if s == "failed" {
						errs <- fmt.Errorf("provision of %s failed", id)
						return
					}
				}
				time.Sleep(100 * time.Millisecond) // a platform's poll pace
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	require.NoError(b, <-errs)
	require.Empty(b, pending, "every instance succeeds within 10 minutes")
	throughput := float64(n) / last.Sub(start).Seconds()

	b.ReportMetric(catalogRate, "catalog-req/s")
	b.ReportMetric(catalogP99.Seconds()*1000, "catalog-p99-ms")
	b.ReportMetric(lastOpRate, "last_operation-req/s")
	b.ReportMetric(lastOpP99.Seconds()*1000, "last_operation-p99-ms")
	b.ReportMetric(lastOpRate/catalogRate, "last_operation/catalog")
	b.ReportMetric(throughput, "osb-instances/s")
	fmt.Printf("\nOSB API, %d concurrent clients for %s on loopback:\n"+
		"  GET /v2/catalog        %8.0f req/s, p99 %v\n"+
		"  GET .../last_operation %8.0f req/s, p99 %v (%.2fx the catalog)\n"+
		"provision through OSB, N=%d, %d clients (PUT, then poll last_operation):\n"+
		"  PUTs answered in       %v (%.0f/s)\n"+
		"  throughput             %7.1f instances/s (first PUT to last succeeded)\n%s%s",
		loadClients, testenv.BenchWindow(loadDuration), catalogRate, catalogP99.Round(10*time.Microsecond), lastOpRate, lastOpP99.Round(10*time.Microsecond), lastOpRate/catalogRate,
		n, osbClients, putDone.Round(time.Millisecond), float64(n)/putDone.Seconds(), throughput,
		testenv.BenchVerdict("last_operation req/s over the catalog's", lastOpRate/catalogRate, 0.5, "x", false),
		testenv.BenchVerdict("last_operation p99", lastOpP99.Seconds()*1000, 20, "ms", true))
}

// load runs do from loadClients goroutines for loadDuration and returns the
// completed requests per second and the p99 latency.
func load(b *testing.B, do func() error) (float64, time.Duration) {
	b.Helper()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, loadClients)
	start := time.Now()
	stop := start.Add(testenv.BenchWindow(loadDuration))
	for range loadClients {
		wg.Go(func() {
			var mine []time.Duration
			for t := time.Now(); t.Before(stop); t = time.Now() {
				if err := do(); err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	require.NoError(b, <-errs)
	slices.Sort(all)
	return float64(len(all)) / elapsed.Seconds(), all[len(all)*99/100]
}
