package starter_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/system"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// BenchmarkProvisionShards is a burst of N provisions (QM_BENCH_N, default
// 1000) with one watcher, then with two watcher shards (`qm watcher
// --shard 0/2` and `1/2`), each run on a dev server of its own (SQLite in
// a file) and the full cluster, and prints the two side by side. The
// instances carry their bucket label from the start, as the OSB API
// creates them (one made with kubectl is labelled by the first shard
// first: TestShardedWatchers). The target: two shards at least as fast
// as one.
func BenchmarkProvisionShards(b *testing.B) {
	figures := map[int]burstFigures{}
	for _, shards := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { figures[shards] = benchShards(b, shards) })
	}
	one, two := figures[1], figures[2]
	if one.throughput == 0 || two.throughput == 0 {
		return
	}
	fmt.Printf("\nprovision burst of %d, two watcher shards vs one (one run):\n"+
		"  throughput       %7.1f vs %7.1f instances/s (%.2fx)\n"+
		"  burst p99        %7.2fs vs %7.2fs\n"+
		"  CPU per instance %6.1fms vs %6.1fms\n",
		testenv.BenchN(), two.throughput, one.throughput, two.throughput/one.throughput,
		pct(two.latencies, 99).Seconds(), pct(one.latencies, 99).Seconds(),
		two.cpuPer.Seconds()*1000, one.cpuPer.Seconds()*1000)
	fmt.Print(testenv.BenchVerdict("a burst's throughput with two watcher shards over one's", two.throughput/one.throughput, 1, "x", false))
}

func benchShards(b *testing.B, shards int) burstFigures {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := testenv.Start(b, testenv.Parts{Worker: true, FileTemporal: true})
	for shard := range shards {
		sys, err := system.Start(ctx, system.Options{Kube: s.Kube.Config, Catalog: s.Catalog(), Temporal: s.Temporal,
			Watcher: &starter.WatcherOptions{Concurrency: 64, Shard: sharding.Shard{Index: shard, Count: shards}}})
		require.NoError(b, err, "starting shard %d of %d", shard, shards)
		b.Cleanup(func() { require.NoError(b, sys.Stop()) })
	}
	planID := s.Plan("one-configmap", "", testenv.Templates("one-configmap"))
	tr := track(ctx, b, s.Kube.Config, s.Namespace)
	plain := instancesOf(s, planID)
	labelled := func(name string) *osbv1alpha1.SFServiceInstance {
		inst := plain(name)
		sharding.Stamp(inst)
		return inst
	}
	f := tr.burst(b, s.Kube.Client, testenv.BenchN(), "burst", labelled)
	b.ReportMetric(f.throughput, "instances/s")
	b.ReportMetric(pct(f.latencies, 99).Seconds(), "burst-p99-s")
	return f
}
