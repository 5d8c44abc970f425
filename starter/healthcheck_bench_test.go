package starter_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/testenv"
)

// benchListeners is how many local listeners the benchmark's services
// point at.
const benchListeners = 100

// BenchmarkHealthChecks registers N RegisteredServices (QM_BENCH_CHECKS,
// default 50,000) with a tcp check every minute against local listeners,
// on the embedded default (full cluster, file-backed Temporal). It reports
// how long it takes until every service has had its first check, then,
// over ten minutes of steady state (a refresh of every service's check
// time, healthcheck.Refresh), the CPU of each process in cores, the
// checks the listeners saw per minute, and the API server's writes per
// minute. The target is ≤ 0.5 core for Quartermaster and Temporal
// together. The listeners run in the qm process, whose figure therefore
// holds their side of every check too; so the benchmark then stops the
// worker and runs its floor: the same probes alone at the same rate, the
// part of the figure no health checker can skip. Run it with `make bench`.
func BenchmarkHealthChecks(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_CHECKS", 50000)
	// A check minute of a minute, but in a smoke run, where only the path
	// through the benchmark is checked: there a tenth of one.
	minute := testenv.BenchWindow(time.Minute)
	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, FileTemporal: true, HealthCheckMinute: minute})
	ctx := context.Background()
	var accepted atomic.Int64
	ports := testenv.Listeners(b, benchListeners, &accepted)

	b.ResetTimer()
	created := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		svc := &primazav1alpha1.RegisteredService{}
		svc.Name, svc.Namespace = fmt.Sprintf("svc-%05d", i), s.Namespace
		svc.Spec = primazav1alpha1.RegisteredServiceSpec{
			ServiceClassIdentity:      []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "bench"}},
			ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "port", Value: new(strconv.Itoa(ports[i%benchListeners]))}},
			HealthCheck: &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{
				Host: "127.0.0.1", Port: int32(ports[i%benchListeners]), Minutes: 1, TimeoutSeconds: 1,
			}},
		}
		return s.Kube.Client.Create(ctx, svc)
	})
	createdIn := time.Since(created)
	for available := 0; available < n; {
		if time.Since(created) > 10*time.Minute {
			b.Fatalf("after 10 minutes %d of %d services have had their first check", available, n)
		}
		time.Sleep(minute / 60) // a poll, not a wait before an assertion: the loop measures when
		var list primazav1alpha1.RegisteredServiceList
		require.NoError(b, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)))
		available = 0
		for _, svc := range list.Items {
			if svc.Status.State == primazav1alpha1.ServiceAvailable {
				available++
			}
		}
	}
	firstChecks := time.Since(created)

	// A check minute for the first checks' writes and signals to settle,
	// then the steady state: a measuring window, not a wait before an
	// assertion. It spans one whole refresh of the check times (each
	// service's comes once in it), which a shorter window would catch in
	// part or not at all; a smoke run takes two check minutes.
	time.Sleep(minute)
	window := healthcheck.Refresh
	if testenv.BenchSmoke() {
		window = 2 * minute
	}
	cpuBefore, writesBefore, checksBefore := testenv.CPU(), apiWrites(b, s), accepted.Load()
	stopProfile := testenv.ProfileSelf(b, "healthchecks-qm")
	time.Sleep(window)
	stopProfile()
	cpuAfter, writesAfter, checksAfter := testenv.CPU(), apiWrites(b, s), accepted.Load()
	b.StopTimer()

	minutes := window.Seconds() / minute.Seconds()
	var cores strings.Builder
	for _, name := range []string{"qm", "temporal", "kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok"} {
		fmt.Fprintf(&cores, " %s %.3f", name, (cpuAfter[name]-cpuBefore[name]).Seconds()/window.Seconds())
	}
	used := func(names ...string) float64 {
		var c float64
		for _, name := range names {
			c += (cpuAfter[name] - cpuBefore[name]).Seconds() / window.Seconds()
		}
		return c
	}
	goal, withAPI := used("qm", "temporal"), used("qm", "temporal", "kube-apiserver", "etcd")
	checksPerMinute := float64(checksAfter-checksBefore) / minutes

	b.ReportMetric(goal, "cores")
	b.ReportMetric(checksPerMinute, "checks/min")
	b.ReportMetric(float64(writesAfter.total-writesBefore.total)/minutes, "api-writes/min")
	b.ReportMetric(firstChecks.Seconds(), "first-checks-s")
	fmt.Printf("\nhealth checks of %d RegisteredServices, tcp every minute, %d local listeners, file-backed Temporal:\n"+
		"  created in %v; every service checked once %v after the first create\n"+
		"  steady state over %v: %.0f checks/min\n"+
		"  CPU in cores:%s\n"+
		"  Quartermaster (qm: worker, watcher and the listeners) + Temporal: %.3f cores; with the API server (kube-apiserver, etcd): %.3f\n"+
		"  API writes/min: %.1f in all, %.1f to RegisteredServices (each service's check time refreshed every %v)\n%s",
		n, benchListeners, createdIn.Round(time.Second), firstChecks.Round(time.Second), window, checksPerMinute,
		cores.String(), goal, withAPI,
		float64(writesAfter.total-writesBefore.total)/minutes, float64(writesAfter.services-writesBefore.services)/minutes, healthcheck.Refresh,
		testenv.BenchVerdict("Quartermaster + Temporal", goal, 0.5, "cores", true))

	// The floor: the same probes alone, at the same rate, against the same
	// listeners, with the worker stopped.
	s.StopWorker()
	floor := probeFloor(b, ports, n, minute, 2*minute)
	b.ReportMetric(floor, "floor-cores")
	fmt.Printf("  floor, the same tcp probes alone at the same rate (healthcheck.Probe, this process, both ends): %.3f cores;\n"+
		"    Quartermaster and Temporal beyond the probes: %.3f cores\n", floor, goal-floor)
}

// probeFloor runs n tcp probes a minute (the worker's own probe code)
// against ports for window, spread evenly, and returns the CPU this
// process used meanwhile, in cores: the dialling and the accepting that
// no health checker can skip.
func probeFloor(b *testing.B, ports []int, n int, minute, window time.Duration) float64 {
	// The window ends the loop, not a probe: one cut short by it would
	// count as failed.
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	limiter := rate.NewLimiter(rate.Limit(float64(n)/minute.Seconds()), 16)
	var failed atomic.Int64
	before := testenv.CPU()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; limiter.Wait(ctx) == nil; i += 16 {
				port := int32(ports[i%len(ports)])
				r := healthcheck.Probe{Check: &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{Host: "127.0.0.1", Port: port, TimeoutSeconds: 1}}}.Run(context.Background())
				if r.Outcome != primazav1alpha1.CheckSucceeded {
					failed.Add(1)
					b.Logf("a floor probe of port %d failed: %s", port, r.Message)
				}
			}
		})
	}
	wg.Wait()
	after := testenv.CPU()
	require.Zero(b, failed.Load(), "floor probes that failed")
	return (after["qm"] - before["qm"]).Seconds() / window.Seconds()
}

// writes counts the API server's write requests so far.
type writes struct{ total, services float64 }

// apiWrites counts the API server's write requests so far, from
// apiRequests.
func apiWrites(b *testing.B, s *testenv.System) writes {
	b.Helper()
	var w writes
	for key, v := range apiRequests(b, s.Kube) {
		verb, resource, _ := strings.Cut(key, " ")
		if !slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, verb) {
			continue
		}
		w.total += v
		if strings.HasPrefix(resource, "registeredservices/") {
			w.services += v
		}
	}
	return w
}
