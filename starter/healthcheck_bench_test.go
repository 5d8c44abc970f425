package starter_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// benchListeners is how many local listeners the benchmark's services
// point at.
const benchListeners = 100

// BenchmarkHealthChecks registers N RegisteredServices (QM_BENCH_CHECKS,
// default 50,000) with a tcp check every minute against local listeners,
// on the embedded default (full cluster, file-backed Temporal). It reports
// how long it takes until every service has had its first check, then,
// over two minutes of steady state, the CPU of each process in cores, the
// checks the listeners saw per minute, and the API server's writes per
// minute. The target is ≤ 0.5 core for worker, Temporal and API server
// together. The listeners run in the qm process, whose figure therefore
// holds their side of every check too. Run it with `make bench`.
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
	// then two of steady state: a measuring window, not a wait before an
	// assertion.
	time.Sleep(minute)
	window := 2 * minute
	cpuBefore, writesBefore, checksBefore := testenv.CPU(), apiWrites(b, s), accepted.Load()
	time.Sleep(window)
	cpuAfter, writesAfter, checksAfter := testenv.CPU(), apiWrites(b, s), accepted.Load()
	b.StopTimer()

	minutes := window.Seconds() / minute.Seconds()
	var cores strings.Builder
	var target float64
	for _, name := range []string{"qm", "temporal", "kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok"} {
		c := (cpuAfter[name] - cpuBefore[name]).Seconds() / window.Seconds()
		fmt.Fprintf(&cores, " %s %.3f", name, c)
		if name == "qm" || name == "temporal" || name == "kube-apiserver" || name == "etcd" {
			target += c
		}
	}
	checksPerMinute := float64(checksAfter-checksBefore) / minutes
	b.ReportMetric(target, "cores")
	b.ReportMetric(checksPerMinute, "checks/min")
	b.ReportMetric(float64(writesAfter.total-writesBefore.total)/minutes, "api-writes/min")
	b.ReportMetric(firstChecks.Seconds(), "first-checks-s")
	fmt.Printf("\nhealth checks of %d RegisteredServices, tcp every minute, %d local listeners, file-backed Temporal:\n"+
		"  created in %v; every service checked once %v after the first create\n"+
		"  steady state over %v: %.0f checks/min\n"+
		"  CPU in cores:%s\n"+
		"  worker (qm, with the listeners) + Temporal + API server (kube-apiserver, etcd): %.3f cores\n"+
		"  API writes/min: %.1f in all, %.1f to RegisteredServices\n%s",
		n, benchListeners, createdIn.Round(time.Second), firstChecks.Round(time.Second), window, checksPerMinute,
		cores.String(), target,
		float64(writesAfter.total-writesBefore.total)/minutes, float64(writesAfter.services-writesBefore.services)/minutes,
		testenv.BenchVerdict("worker + Temporal + API server", target, 0.5, "cores", true))
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
