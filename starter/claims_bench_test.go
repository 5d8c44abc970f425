package starter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// provisionThroughput and provisionCPU are BenchmarkProvision's figures on
// the full cluster (instances/s, CPU per instance), when it ran before in
// the same `make bench`, for comparison.
var (
	provisionThroughput float64
	provisionCPU        time.Duration
)

// BenchmarkClaims measures claim resolution on the embedded default: N
// registered services (no health check: Available at once) and N claims
// that each of them matches, created by 16 clients as kubectl would; the
// clock runs from the first claim's create until the last is Resolved. N
// is QM_BENCH_CLAIMS (default 1000). Every claim contends for the same
// services in the same order, which is the worst case of the
// resourceVersion lock. Run it with `make bench`.
func BenchmarkClaims(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_CLAIMS", 1000)
	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, Concurrency: 64, FileTemporal: true})
	ctx := context.Background()
	testenv.Parallel(b, n, func(i int) error {
		svc := &primazav1alpha1.RegisteredService{}
		svc.Name, svc.Namespace = fmt.Sprintf("db-%05d", i), s.Namespace
		svc.Spec.ServiceClassIdentity = []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}}
		svc.Spec.ServiceEndpointDefinition = []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "host", Value: new(svc.Name + ".example")}}
		return s.Kube.Client.Create(ctx, svc)
	})
	// The benchmark watches what it waits for, as kubectl get -w would, and
	// counts each object once as its events come: a poll that lists a
	// thousand claims at each change would load the machine it measures.
	watched, err := cache.New(s.Kube.Config, cache.Options{Scheme: crds.NewScheme(), DefaultNamespaces: map[string]cache.Config{s.Namespace: {}}})
	require.NoError(b, err)
	available := newSeen(n, func(o any) bool {
		svc, ok := o.(*primazav1alpha1.RegisteredService)
		return ok && svc.Status.State == primazav1alpha1.ServiceAvailable
	})
	resolved := newSeen(n, func(o any) bool {
		claim, ok := o.(*primazav1alpha1.ServiceClaim)
		return ok && claim.Status.State == primazav1alpha1.ClaimResolved
	})
	for obj, seen := range map[ctrlclient.Object]*seen{&primazav1alpha1.RegisteredService{}: available, &primazav1alpha1.ServiceClaim{}: resolved} {
		inf, err := watched.GetInformer(ctx, obj)
		require.NoError(b, err)
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: seen.see, UpdateFunc: func(_, o any) { seen.see(o) }})
		require.NoError(b, err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = watched.Start(cctx) }()
	require.True(b, watched.WaitForCacheSync(cctx))
	available.wait(b, "services are Available", 10*time.Minute)

	// The services' own writes (their state's Events, posted by a recorder
	// that batches them) are over before the claims' are counted.
	settleWrites(b, s.Kube)

	b.ResetTimer()
	cpuBefore, reqBefore := testenv.CPU(), apiRequests(b, s.Kube)
	profiled := testenv.ProfileAPIServer(b, s.Kube, "claims-kube-apiserver", 15)
	start := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		claim := &primazav1alpha1.ServiceClaim{}
		claim.Name, claim.Namespace = fmt.Sprintf("claim-%05d", i), s.Namespace
		claim.Spec.ServiceClassIdentity = []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}}
		claim.Spec.ServiceEndpointDefinitionKeys = []string{"host"}
		claim.Spec.EnvironmentTag = "dev"
		return s.Kube.Client.Create(ctx, claim)
	})
	created := time.Since(start)
	resolved.wait(b, "claims are Resolved", 10*time.Minute)
	elapsed := time.Since(start)
	b.StopTimer()
	cpuAfter, reqAfter := testenv.CPU(), apiRequests(b, s.Kube)
	profiled()

	// Every claim holds its own service, and no service two claims.
	var services primazav1alpha1.RegisteredServiceList
	require.NoError(b, s.Kube.Client.List(ctx, &services, ctrlclient.InNamespace(s.Namespace)))
	holders := map[string]bool{}
	for _, svc := range services.Items {
		require.NotNil(b, svc.Status.ClaimRef, "service %s is held", svc.Name)
		holders[svc.Status.ClaimRef.Name] = true
	}
	require.Len(b, holders, n, "each claim holds one service")

	throughput := float64(n) / elapsed.Seconds()
	b.ReportMetric(throughput, "claims/s")
	fmt.Printf("\nclaims: %d services, %d claims that each of them matches, 16 clients, file-backed Temporal:\n"+
		"  every claim Resolved %v after the first create (all created in %v): %.1f claims/s\n"+
		"  CPU per claim:%s\n  API requests per claim:\n", n, n, elapsed.Round(time.Millisecond), created.Round(time.Millisecond), throughput,
		testenv.CPUPer(cpuBefore, cpuAfter, n))
	printRequestsPerInstance(reqBefore, reqAfter, n)
	// The benchmark's own create of each claim is not Quartermaster's.
	// Nor are the writes whose number is bounded by time, not by claims:
	// the leader elections' lease renewals, and the ServiceCatalog's
	// rewrites (at most two every catalogInterval per namespace). They are
	// printed beside.
	timed := func(m map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			if strings.HasSuffix(k, " leases/") || strings.Contains(k, " servicecatalogs/") {
				out[k] = v
			}
		}
		return out
	}
	periodic := writesPer(timed(reqBefore), timed(reqAfter), n)
	writes := writesPer(reqBefore, reqAfter, n) - 1 - periodic
	fmt.Printf("  writes bounded by time, not by claims (lease renewals, the catalog's rewrites): %.3f per claim\n", periodic)
	fmt.Print(testenv.BenchVerdict("API writes per claim (the claim's own create and the writes bounded by time left out)", writes, 3, "", true))
	if provisionThroughput > 0 {
		fmt.Printf("  the same run's provision throughput (full cluster): %.1f instances/s; claims resolve at %.2fx that\n%s",
			provisionThroughput, throughput/provisionThroughput,
			testenv.BenchVerdict("claims/s over the same run's provisions/s", throughput/provisionThroughput, 0.5, "x", false))
	}
}

// writesPer is the API writes (every verb but GET, LIST and WATCH) per n
// between two readings of apiRequests.
func writesPer(before, after map[string]float64, n int) float64 {
	var sum float64
	for k, v := range after {
		switch verb, _, _ := strings.Cut(k, " "); verb {
		case "GET", "LIST", "WATCH":
		default:
			sum += v - before[k]
		}
	}
	return sum / float64(n)
}

// settleWrites waits until the API server has taken no write for a second
// (at most 30 s), so that a measurement that follows counts none of what
// came before it. Not settling is no failure: the figures then say so.
func settleWrites(b *testing.B, kube *testenv.Cluster) {
	last, quiet := writesPer(nil, apiRequests(b, kube), 1), 0
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, false, func(context.Context) (bool, error) {
		now := writesPer(nil, apiRequests(b, kube), 1)
		if now == last {
			quiet++
		} else {
			last, quiet = now, 0
		}
		return quiet >= 4, nil
	})
}

// seen counts the objects a watch has shown in a state, each once, and
// says when it has seen n of them.
type seen struct {
	is   func(any) bool
	n    int
	mu   sync.Mutex
	them map[string]bool
	all  chan struct{}
}

func newSeen(n int, is func(any) bool) *seen {
	return &seen{is: is, n: n, them: map[string]bool{}, all: make(chan struct{})}
}

// see is the watch's event handler.
func (s *seen) see(o any) {
	if !s.is(o) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := o.(ctrlclient.Object).GetName()
	if s.them[name] || len(s.them) == s.n {
		return
	}
	if s.them[name] = true; len(s.them) == s.n {
		close(s.all)
	}
}

// wait waits until n objects have been seen in the state, within timeout.
func (s *seen) wait(b *testing.B, what string, timeout time.Duration) {
	select {
	case <-s.all:
	case <-time.After(timeout):
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Failf(b, "timed out", "after %v, %d of %d %s", timeout, len(s.them), s.n, what)
	}
}
