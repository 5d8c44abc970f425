package starter_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// benchClients is the number of parallel clients creating resources.
const benchClients = 16

// BenchmarkProvision measures the provision pipeline on the embedded default
// (envtest's API server, the dev server with SQLite in a file): N instances
// of a one-ConfigMap plan created by 16 parallel clients as kubectl would,
// each timed from its create to the watcher seeing it succeeded. It also
// reports the same API server's raw create rate, and the latency at a steady
// 20 creates/s. N is QM_BENCH_N (default 1000). Run it with `make bench`.
func BenchmarkProvision(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	kube := testenv.Kubernetes(b)
	tc := testenv.FileTemporal(b)

	ns := kube.Namespace(b)
	plan := decode(b, fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: one-configmap, namespace: %[1]s}
spec:
  name: one-configmap
  id: %[1]s-one-configmap
  description: one ConfigMap per instance
  serviceId: bench
  templates:
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}}
      data: {plan: {{ .plan.spec.name }}}
`, ns))
	require.NoError(b, kube.Client.Create(ctx, plan))
	svc := decode(b, fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {name: bench, namespace: %s}
spec: {name: bench, id: bench, description: bench, bindable: false}
`, ns))
	require.NoError(b, kube.Client.Create(ctx, svc))

	cfg := kube.Config
	direct := kube.Client
	cat := testenv.Catalog(b, cfg)
	require.Eventually(b, func() bool { _, err := cat.Plan(ctx, ns+"-one-configmap"); return err == nil }, 10*time.Second, 10*time.Millisecond)
	testenv.Quartermaster(b, cfg, tc, cat, starter.WatcherOptions{Concurrency: 64})

	// The clock stops when an informer sees the instance succeeded, as a
	// user watching with kubectl would.
	var mu sync.Mutex
	done := map[string]time.Time{}
	informers, err := cache.New(cfg, cache.Options{Scheme: crds.NewScheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(b, err)
	inf, err := informers.GetInformer(ctx, &osbv1alpha1.SFServiceInstance{})
	require.NoError(b, err)
	record := func(obj any) {
		inst, ok := obj.(*osbv1alpha1.SFServiceInstance)
		if !ok || inst.Status.State != osbv1alpha1.StateSucceeded {
			return
		}
		mu.Lock()
		if _, seen := done[inst.Name]; !seen {
			done[inst.Name] = time.Now()
		}
		mu.Unlock()
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }})
	require.NoError(b, err)
	go func() { _ = informers.Start(ctx) }()
	require.True(b, informers.WaitForCacheSync(ctx))

	newInstance := func(name string) *osbv1alpha1.SFServiceInstance {
		return &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "bench", PlanID: ns + "-one-configmap"},
		}
	}
	waitAll := func(names []string, timeout time.Duration) {
		require.Eventually(b, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, name := range names {
				if _, ok := done[name]; !ok {
					return false
				}
			}
			return true
		}, timeout, 10*time.Millisecond, "every instance succeeds")
	}
	latencies := func(names []string, created map[string]time.Time) []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		out := make([]time.Duration, 0, len(names))
		for _, name := range names {
			out = append(out, done[name].Sub(created[name]))
		}
		slices.Sort(out)
		return out
	}

	// 1. The API server's raw create rate, with the same clients.
	rawStart := time.Now()
	parallel(b, n, func(i int) error {
		return direct.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw-%05d", i), Namespace: ns}})
	})
	rawRate := float64(n) / time.Since(rawStart).Seconds()

	// 2. A burst of N instances.
	cpuBefore := processCPU()
	requestsBefore := apiRequests(b)
	b.ResetTimer()
	names := make([]string, n)
	created := make(map[string]time.Time, n)
	var cmu sync.Mutex
	burstStart := time.Now()
	parallel(b, n, func(i int) error {
		name := fmt.Sprintf("burst-%05d", i)
		names[i] = name
		t := time.Now()
		cmu.Lock()
		created[name] = t
		cmu.Unlock()
		return direct.Create(ctx, newInstance(name))
	})
	waitAll(names, 10*time.Minute)
	mu.Lock()
	var last time.Time
	for _, name := range names {
		if done[name].After(last) {
			last = done[name]
		}
	}
	mu.Unlock()
	b.StopTimer()
	cpuAfter := processCPU()
	requestsAfter := apiRequests(b)
	throughput := float64(n) / last.Sub(burstStart).Seconds()
	burst := latencies(names, created)

	// 3. A steady 20 creates/s for 10 seconds.
	steadyNames := make([]string, 200)
	steadyCreated := make(map[string]time.Time, 200)
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
	waitAll(steadyNames, 5*time.Minute)
	steady := latencies(steadyNames, steadyCreated)

	b.ReportMetric(throughput, "instances/s")
	b.ReportMetric(pct(burst, 50).Seconds(), "burst-p50-s")
	b.ReportMetric(pct(burst, 99).Seconds(), "burst-p99-s")
	b.ReportMetric(pct(steady, 50).Seconds(), "steady20-p50-s")
	b.ReportMetric(pct(steady, 99).Seconds(), "steady20-p99-s")
	b.ReportMetric(rawRate, "raw-creates/s")
	fmt.Printf("\nprovision, N=%d, %d clients, file-backed Temporal:\n"+
		"  throughput            %7.1f instances/s (first create to last succeeded)\n"+
		"  burst latency         p50 %v, p99 %v\n"+
		"  steady 20 creates/s   p50 %v, p99 %v\n"+
		"  raw ConfigMap creates %7.1f /s (same API server, same clients)\n",
		n, benchClients, throughput, pct(burst, 50).Round(time.Millisecond), pct(burst, 99).Round(time.Millisecond),
		pct(steady, 50).Round(time.Millisecond), pct(steady, 99).Round(time.Millisecond), rawRate)
	fmt.Println("  API requests per instance in the burst (the benchmark's own create included):")
	printRequestsPerInstance(requestsBefore, requestsAfter, n)
	fmt.Printf("  CPU per instance in the burst:")
	for _, name := range slices.Sorted(maps.Keys(cpuAfter)) {
		fmt.Printf(" %s %.1fms", name, (cpuAfter[name]-cpuBefore[name]).Seconds()*1000/float64(n))
	}
	fmt.Println()
}

// processCPU returns the CPU time used so far by this process ("qm", which
// runs the worker and the watcher) and by its children (kube-apiserver,
// etcd, temporal), from /proc.
func processCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15), after the ")".
		line := string(raw)
		comm := line[strings.Index(line, "(")+1 : strings.LastIndex(line, ")")]
		fields := strings.Fields(line[strings.LastIndex(line, ")")+2:])
		ppid, _ := strconv.Atoi(fields[1])
		if pid != self && ppid != self {
			continue
		}
		if pid == self {
			comm = "qm"
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		out[comm] += time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	return out
}

// parallel runs do(0..n-1) on benchClients goroutines and fails the
// benchmark on the first error.
func parallel(b *testing.B, n int, do func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(b, first)
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
func apiRequests(t testing.TB) map[string]float64 {
	kube := testenv.Kubernetes(t)
	cs := kubernetes.NewForConfigOrDie(kube.Config)
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndex(l, " ")
		v, _ := strconv.ParseFloat(l[i+1:], 64)
		lab := l[:i]
		var verb, res, sub string
		for _, kv := range strings.Split(lab[strings.Index(lab, "{")+1:len(lab)-1], ",") {
			p := strings.SplitN(kv, "=", 2)
			switch p[0] {
			case "verb":
				verb = strings.Trim(p[1], `"`)
			case "resource":
				res = strings.Trim(p[1], `"`)
			case "subresource":
				sub = strings.Trim(p[1], `"`)
			}
		}
		out[verb+" "+res+"/"+sub] += v
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
		if per := (after[k] - before[k]) / float64(n); per >= 0.05 {
			fmt.Printf("    %-40s %.2f\n", k, per)
		}
	}
}
