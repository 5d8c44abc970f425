package starter_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// tracker records when an informer first sees each instance succeeded: the
// benchmarks' clock stops there, as for a user watching with kubectl.
type tracker struct {
	mu   sync.Mutex
	done map[string]time.Time
}

// burstFigures are what one burst of provisions measured.
type burstFigures struct {
	provisionFigures
	// latencies are each instance's, from its create to succeeded, sorted.
	latencies []time.Duration
	// cpuBefore and cpuAfter are testenv.CPU around the burst.
	cpuBefore, cpuAfter map[string]time.Duration
}

// track watches the instances of ns until ctx is done.
func track(ctx context.Context, b *testing.B, cfg *rest.Config, ns string) *tracker {
	tr := &tracker{done: map[string]time.Time{}}
	record := func(obj any) {
		inst, ok := obj.(*osbv1alpha1.SFServiceInstance)
		if !ok || inst.Status.State != osbv1alpha1.StateSucceeded {
			return
		}
		tr.mu.Lock()
		if _, seen := tr.done[inst.Name]; !seen {
			tr.done[inst.Name] = time.Now()
		}
		tr.mu.Unlock()
	}
	watchInstances(ctx, b, cfg, ns, toolscache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }})
	return tr
}

// waitAll waits until every instance of names succeeded.
func (tr *tracker) waitAll(b *testing.B, names []string, timeout time.Duration) {
	require.Eventually(b, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, name := range names {
			if _, ok := tr.done[name]; !ok {
				return false
			}
		}
		return true
	}, timeout, 10*time.Millisecond, "every instance succeeds")
}

// seen is when each instance was seen to succeed.
func (tr *tracker) seen() map[string]time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.done)
}

// latencies are those of names, from created to succeeded, sorted.
func (tr *tracker) latencies(names []string, created map[string]time.Time) []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]time.Duration, 0, len(names))
	for _, name := range names {
		out = append(out, tr.done[name].Sub(created[name]))
	}
	slices.Sort(out)
	return out
}

// burst creates n instances named prefix-00000... from testenv.BenchClients
// clients at once, waits until all succeeded, and measures the throughput
// (first create to last succeeded) and the CPU of every process per
// instance. It is the benchmark's timed part.
func (tr *tracker) burst(b *testing.B, c ctrlclient.Client, n int, prefix string, newInstance func(string) *osbv1alpha1.SFServiceInstance) burstFigures {
	ctx := context.Background()
	f := burstFigures{cpuBefore: testenv.CPU()}
	b.ResetTimer()
	names := make([]string, n)
	created := make(map[string]time.Time, n)
	var mu sync.Mutex
	start := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		name := fmt.Sprintf("%s-%05d", prefix, i)
		names[i] = name
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		return c.Create(ctx, newInstance(name))
	})
	tr.waitAll(b, names, 10*time.Minute)
	b.StopTimer()
	f.cpuAfter = testenv.CPU()
	f.latencies = tr.latencies(names, created)
	var last time.Time
	tr.mu.Lock()
	for _, name := range names {
		if tr.done[name].After(last) {
			last = tr.done[name]
		}
	}
	tr.mu.Unlock()
	f.throughput = float64(n) / last.Sub(start).Seconds()
	f.cpuPer = testenv.CPUUsed(f.cpuBefore, f.cpuAfter, n)
	return f
}
