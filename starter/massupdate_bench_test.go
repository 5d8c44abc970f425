package starter_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// BenchmarkMassUpdate's figures, for BenchmarkMassUpdateFloor, which runs
// after it in the same binary: the provision rate and CPU per instance, and
// the CPU per update of its floor (the Update runs started one by one).
var (
	massProvisionRate               float64
	massProvisionCPU, massDirectCPU time.Duration
)

// BenchmarkMassUpdate measures mass updates on the embedded default (the
// full cluster, Temporal's dev server on its SQLite file): N instances
// (QM_BENCH_MASS, default 10000) provisioned by 16 clients as kubectl
// would, then the plan changed twice, each change brought to every
// instance by a mass update, at the default concurrency and at 50. It
// prints the updates per second of each next to the provision throughput
// of the same run and to the floor (the same Update runs started one by
// one, without a mass update), the worker's peak memory, and how long
// each run's histories grew (continue-as-new keeps them bounded), and ends
// with the targets: at the default concurrency, at least 0.85x the
// provision rate and at most 6 minutes for 10,000. Run it with `make bench`.
func BenchmarkMassUpdate(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_MASS", 10000)
	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, Concurrency: 64, FileTemporal: true})
	start, cpu := time.Now(), testenv.CPU()
	planID := massFleet(b, s, n, "", func(int) string { return "" })
	provision := float64(n) / time.Since(start).Seconds()
	after := testenv.CPU()
	massProvisionRate, massProvisionCPU = provision, testenv.CPUUsed(cpu, after, n)
	report := fmt.Sprintf("mass update of %d instances; provisioned at %.1f/s in this run, CPU per instance %s", n, provision, testenv.CPUPer(cpu, after, n))
	b.ResetTimer()

	// The floor: the same Update runs started without a mass update, by 16
	// clients as the watcher would start them.
	newVersion(b, s, "2")
	start, cpu = time.Now(), testenv.CPU()
	testenv.Parallel(b, n, func(i int) error {
		t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: fmt.Sprintf("m-%03d", i)}
		run, err := s.Temporal.ExecuteWorkflow(context.Background(), clientOptions(runs.WorkflowID(t)), runs.WorkflowType(lifecycle.OpUpdate), t)
		if err != nil {
			return err
		}
		return run.Get(context.Background(), nil)
	})
	direct := float64(n) / time.Since(start).Seconds()
	after = testenv.CPU()
	massDirectCPU = testenv.CPUUsed(cpu, after, n)
	report += fmt.Sprintf("\n  the floor, Update runs started one by one: %.1f/s = %.2fx provision, CPU per update %s", direct, direct/provision, testenv.CPUPer(cpu, after, n))

	var defaultRate float64
	var defaultTook time.Duration
	for i, concurrency := range []int{0, 50} {
		version := strconv.Itoa(i + 3)
		newVersion(b, s, version)
		cpu = testenv.CPU()
		began := time.Now()
		run, err := s.Temporal.ExecuteWorkflow(context.Background(), clientOptions(runs.MassUpdateID(s.Namespace+"/bench-"+version)),
			runs.MassUpdateType, massupdate.Request{Name: s.Namespace + "/bench-" + version, Selector: massupdate.Selector{PlanIDs: []string{planID}}, Concurrency: concurrency})
		require.NoError(b, err)
		var p massupdate.Progress
		require.NoError(b, run.Get(context.Background(), &p))
		took := time.Since(began)
		require.Equal(b, n, p.Succeeded, "every instance updated: %s", p.Line())
		rate := float64(n) / took.Seconds()
		if concurrency == 0 {
			defaultRate, defaultTook = rate, took
		}
		runsOf, longest := histories(b, s, runs.MassUpdateID(s.Namespace+"/bench-"+version))
		report += fmt.Sprintf("\n  concurrency %-3d %6.1f updates/s = %.2fx provision, %s for all, CPU per update %s; %d runs (continue-as-new), longest history %d events",
			p.Concurrency, rate, rate/provision, took.Round(time.Second), testenv.CPUPer(cpu, testenv.CPU(), n), runsOf, longest)
	}
	report += fmt.Sprintf("\n  peak memory of the worker (and watcher) process: %s\n", peakRSS())
	// The targets are the default concurrency's, the one users get; the
	// floor's ratio above says what the machine allows.
	report += testenv.BenchVerdict("mass update at the default concurrency, updates/s over provisions/s", defaultRate/provision, 0.85, "x", false)
	report += testenv.BenchVerdict(fmt.Sprintf("its time for %d instances, scaled to 10,000", n), defaultTook.Minutes()*10000/float64(n), 6, "min", true)
	b.StopTimer()
	fmt.Println(report)
}

func clientOptions(id string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: runs.TaskQueue}
}

// histories counts the runs of a workflow ID and the longest history.
func histories(b *testing.B, s *testenv.System, id string) (int, int64) {
	resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	require.NoError(b, err)
	var longest int64
	for _, e := range resp.GetExecutions() {
		d, err := s.Temporal.DescribeWorkflowExecution(context.Background(), id, e.GetExecution().GetRunId())
		require.NoError(b, err)
		longest = max(longest, d.GetWorkflowExecutionInfo().GetHistoryLength())
	}
	return len(resp.GetExecutions()), longest
}

// peakRSS is this process's peak resident memory (VmHWM).
func peakRSS() string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
