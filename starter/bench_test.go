package starter_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// provisionFigures are what BenchmarkProvision compares across clusters.
type provisionFigures struct {
	throughput float64
	cpuPer     time.Duration
	p99        time.Duration
}

// BenchmarkProvision measures the provision pipeline on the embedded default
// (the dev server with SQLite in a file): N instances of a one-ConfigMap
// plan created by 16 parallel clients as kubectl would, each timed from its
// create to the watcher seeing it succeeded. It also reports the same API
// server's raw create rate, and the latency at a steady 20 creates/s. N is
// QM_BENCH_N (default 1000). Run it with `make bench`.
//
// It runs twice in one process: on the bare API server, then on the full
// cluster of `qm dev`, whose garbage collector and other controllers watch
// every object the pipeline writes, and prints the two side by side. The
// bare run goes first, so that the full cluster's processes are not yet
// running while it is measured. A third run is the full cluster's on a
// production-shaped Temporal (internal/temporalcluster: PostgreSQL, and
// each service a process) instead of the dev server.
func BenchmarkProvision(b *testing.B) {
	figures := map[string]provisionFigures{}
	clusters := []string{"bare", "full", "full-temporal-cluster"}
	if testenv.BenchSmoke() {
		// make test's smoke run: the lifecycle on a Temporal cluster is
		// TestOnATemporalCluster's; the cluster's figures are make bench's.
		clusters = clusters[:2]
	}
	for _, cluster := range clusters {
		b.Run("cluster="+cluster, func(b *testing.B) {
			figures[cluster] = benchProvision(b, cluster == "bare", cluster == "full-temporal-cluster")
		})
	}
	bare, full, onCluster := figures["bare"], figures["full"], figures["full-temporal-cluster"]
	if full.throughput > 0 && onCluster.throughput > 0 {
		fmt.Printf("\nprovision, Temporal cluster (PostgreSQL, 4 services) vs dev server (SQLite), full cluster (one run):\n"+
			"  throughput       %7.1f vs %7.1f instances/s (%.2fx)\n"+
			"  burst p99        %7.2fs vs %7.2fs\n"+
			"  CPU per instance %6.1fms vs %6.1fms (%.2fx)\n",
			onCluster.throughput, full.throughput, onCluster.throughput/full.throughput,
			onCluster.p99.Seconds(), full.p99.Seconds(),
			onCluster.cpuPer.Seconds()*1000, full.cpuPer.Seconds()*1000, onCluster.cpuPer.Seconds()/full.cpuPer.Seconds())
	}
	provisionThroughput, provisionCPU, provisionBareCPU = full.throughput, full.cpuPer, bare.cpuPer
	if bare.throughput > 0 && full.throughput > 0 {
		fmt.Printf("\nprovision, full cluster vs bare API server (one run):\n"+
			"  throughput       %7.1f vs %7.1f instances/s (%.2fx)\n"+
			"  CPU per instance %6.1fms vs %6.1fms (%+.1fms with the controllers, scheduler and kwok)\n",
			full.throughput, bare.throughput, full.throughput/bare.throughput,
			full.cpuPer.Seconds()*1000, bare.cpuPer.Seconds()*1000, (full.cpuPer-bare.cpuPer).Seconds()*1000)
	}
}

func benchProvision(b *testing.B, bare, temporalCluster bool) provisionFigures {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, Concurrency: 64, FileTemporal: !temporalCluster, TemporalCluster: temporalCluster, Bare: bare})
	ns, cfg, direct := s.Namespace, s.Kube.Config, s.Kube.Client
	planID := s.Plan("one-configmap", "", testenv.Templates("one-configmap"))

	tr := track(ctx, b, cfg, ns)
	newInstance := instancesOf(s, planID)

	// 1. The API server's raw create rate, with the same clients.
	rawStart := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		return direct.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw-%05d", i), Namespace: ns}})
	})
	rawRate := float64(n) / time.Since(rawStart).Seconds()

	// 2. A burst of N instances.
	requestsBefore, eventsBefore := apiRequests(b, s.Kube), watchEvents(b, s.Kube)
	profiled, selfProfiled := func() {}, func() {}
	if bare { // with QM_BENCH_PROFILE; BenchmarkKubernetesFloor profiles its calls alone
		profiled = testenv.ProfileAPIServer(b, s.Kube, "provision-kube-apiserver", 8)
		selfProfiled = testenv.ProfileSelf(b, "provision-qm")
	}
	burst := tr.burst(b, direct, n, "burst", newInstance)
	selfProfiled()
	requestsAfter, eventsAfter := apiRequests(b, s.Kube), watchEvents(b, s.Kube)
	profiled()
	throughput := burst.throughput

	// 3. A steady 20 creates/s for 10 seconds (a smoke run's window: 1 s).
	steadyCount := int(testenv.BenchWindow(10*time.Second) / (50 * time.Millisecond))
	steadyNames := make([]string, steadyCount)
	steadyCreated := make(map[string]time.Time, steadyCount)
	tick := time.NewTicker(50 * time.Millisecond)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range steadyNames {
		<-tick.C
		name := fmt.Sprintf("steady-%05d", i)
		steadyNames[i] = name
		steadyCreated[name] = time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := direct.Create(ctx, newInstance(name)); err != nil {
				failed.Add(1)
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	require.Zero(b, failed.Load(), "steady creates failed")
	tr.waitAll(b, steadyNames, 5*time.Minute)
	steady := tr.latencies(steadyNames, steadyCreated)

	b.ReportMetric(throughput, "instances/s")
	b.ReportMetric(pct(burst.latencies, 50).Seconds(), "burst-p50-s")
	b.ReportMetric(pct(burst.latencies, 99).Seconds(), "burst-p99-s")
	b.ReportMetric(pct(steady, 50).Seconds(), "steady20-p50-s")
	b.ReportMetric(pct(steady, 99).Seconds(), "steady20-p99-s")
	b.ReportMetric(rawRate, "raw-creates/s")
	temporal := "file-backed Temporal dev server"
	if temporalCluster {
		temporal = "Temporal cluster"
	}
	fmt.Printf("\nprovision on the %s, N=%d, %d clients, %s:\n"+
		"  throughput            %7.1f instances/s (first create to last succeeded)\n"+
		"  burst latency         p50 %v, p99 %v\n"+
		"  steady 20 creates/s   p50 %v, p99 %v\n"+
		"  raw ConfigMap creates %7.1f /s (same API server, same clients)\n",
		map[bool]string{true: "bare API server", false: "full cluster"}[bare], n, testenv.BenchClients, temporal, throughput, pct(burst.latencies, 50).Round(time.Millisecond), pct(burst.latencies, 99).Round(time.Millisecond),
		pct(steady, 50).Round(time.Millisecond), pct(steady, 99).Round(time.Millisecond), rawRate)
	fmt.Println("  API requests per instance in the burst (the benchmark's own create included):")
	printRequestsPerInstance(requestsBefore, requestsAfter, n)
	fmt.Println("  watch events sent per instance in the burst, by resource:")
	printRequestsPerInstance(eventsBefore, eventsAfter, n)
	fmt.Printf("  CPU per instance in the burst:%s\n", testenv.CPUPer(burst.cpuBefore, burst.cpuAfter, n))
	figures := burst.provisionFigures
	figures.p99 = pct(burst.latencies, 99)
	return figures
}

// instancesOf makes the instances a benchmark creates: of planID, of the
// System's service, in its namespace.
func instancesOf(s *testenv.System, planID string) func(name string) *osbv1alpha1.SFServiceInstance {
	return func(name string) *osbv1alpha1.SFServiceInstance {
		return &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: s.ServiceID, PlanID: planID},
		}
	}
}

// watchInstances runs an informer on the SFServiceInstances of ns, with
// handler, until ctx is done; it returns once the informer has synced.
func watchInstances(ctx context.Context, b *testing.B, cfg *rest.Config, ns string, handler toolscache.ResourceEventHandler) {
	informers, err := cache.New(cfg, cache.Options{Scheme: crds.NewScheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(b, err)
	inf, err := informers.GetInformer(ctx, &osbv1alpha1.SFServiceInstance{})
	require.NoError(b, err)
	_, err = inf.AddEventHandler(handler)
	require.NoError(b, err)
	go func() { _ = informers.Start(ctx) }()
	require.True(b, informers.WaitForCacheSync(ctx))
}

// watchedNamespace is a namespace of a bare API server whose instances
// informers watch, as the components would: what a floor benchmark
// writes into.
func watchedNamespace(ctx context.Context, b *testing.B, informers int) (*testenv.Cluster, string) {
	kube := testenv.BareKubernetes(b)
	return kube, watchedNamespaceOf(ctx, b, kube, informers)
}

// watchedNamespaceOf is watchedNamespace on kube.
func watchedNamespaceOf(ctx context.Context, b *testing.B, kube *testenv.Cluster, informers int) string {
	ns := kube.Namespace(b)
	for range informers {
		watchInstances(ctx, b, kube.Config, ns, toolscache.ResourceEventHandlerFuncs{})
	}
	return ns
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// apiRequests reads the API server's request counters, by verb, resource
// and subresource, from its /metrics.
func apiRequests(t testing.TB, kube *testenv.Cluster) map[string]float64 {
	out := map[string]float64{}
	for _, s := range testenv.ScrapeAPIServer(t, kube, "apiserver_request_total")["apiserver_request_total"].GetMetric() {
		out[testenv.Label(s, "verb")+" "+testenv.Label(s, "resource")+"/"+testenv.Label(s, "subresource")] += s.GetCounter().GetValue()
	}
	return out
}

// watchEvents reads how many watch events the API server has sent to its
// watchers, by resource: each write's cost grows with the watchers it
// reaches.
func watchEvents(t testing.TB, kube *testenv.Cluster) map[string]float64 {
	out := map[string]float64{}
	for _, s := range testenv.ScrapeAPIServer(t, kube, "apiserver_watch_events_total")["apiserver_watch_events_total"].GetMetric() {
		out["events "+testenv.Label(s, "resource")] += s.GetCounter().GetValue()
	}
	return out
}

// printRequestsPerInstance prints the API requests made per instance
// between two readings of apiRequests.
func printRequestsPerInstance(before, after map[string]float64, n int) {
	var keys []string
	for k := range after {
		if after[k]-before[k] > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		// Every write is printed, however rare; reads and watch events
		// from 0.005 up.
		verb, _, _ := strings.Cut(k, " ")
		if per := (after[k] - before[k]) / float64(n); per >= 0.005 || (verb != "GET" && verb != "LIST" && verb != "WATCH" && verb != "events") {
			fmt.Printf("    %-40s %.3f\n", k, per)
		}
	}
}
