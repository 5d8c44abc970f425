package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// childrenInput is what childrenShape starts: children From..To-1, at most
// Concurrency at a time, continuing as new after ContinueAfterEach starts
// (MassUpdate's bound is 1,500).
type childrenInput struct {
	Prefix            string
	From, To          int
	Concurrency       int
	ContinueAfterEach int
}

// childrenShape has the shape of a mass update with nothing inside: it
// starts empty runs of Provision's shape as its children, at most
// Concurrency at a time, and continues as new when Temporal suggests it or
// after ContinueAfterEach starts, letting those in flight end first, as
// MassUpdate does.
func childrenShape(ctx workflow.Context, in childrenInput) error {
	sel := workflow.NewSelector(ctx)
	inFlight, started := 0, 0
	draining := false
	for in.From < in.To || inFlight > 0 {
		for !draining && inFlight < in.Concurrency && in.From < in.To {
			t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "bench", Name: fmt.Sprintf("%s-%05d", in.Prefix, in.From)}
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID:        runs.WorkflowID(t),
				ParentClosePolicy: enums.PARENT_CLOSE_POLICY_ABANDON,
			})
			sel.AddFuture(workflow.ExecuteChildWorkflow(cctx, "ProvisionShape", t), func(f workflow.Future) {
				inFlight--
				if err := f.Get(ctx, nil); err != nil {
					workflow.GetLogger(ctx).Error("a child failed", "error", err)
				}
			})
			in.From++
			inFlight++
			if started++; started >= in.ContinueAfterEach || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				draining = true
			}
		}
		if draining && inFlight == 0 && in.From < in.To {
			return workflow.NewContinueAsNewError(ctx, "ChildrenShape", in)
		}
		sel.Select(ctx)
	}
	return nil
}

// BenchmarkMassUpdateFloor measures what the mass update's way of running
// updates, as children of one workflow, costs in itself on the embedded
// default's dev server (SQLite in a file): N empty runs of Provision's shape
// started one by one from 16 clients, as BenchmarkMassUpdate's floor starts
// the Update runs, then the same runs started as children of one workflow of
// the mass update's shape, at the default concurrency and at 50. The
// children's rate over the direct runs' is the most a mass update built
// this way can reach of its own floor, with no Kubernetes in either. What
// the children add in CPU per run, added to the CPU per update of
// BenchmarkMassUpdate's floor, gives the most a mass update of children can
// reach on the CPU the provisions of that run used.
func BenchmarkMassUpdateFloor(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_MASS", 10000)
	tc := testenv.FileTemporal(b)
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(provisionShape, workflow.RegisterOptions{Name: "ProvisionShape"})
	w.RegisterWorkflowWithOptions(childrenShape, workflow.RegisterOptions{Name: "ChildrenShape"})
	require.NoError(b, w.Start())
	defer w.Stop()

	b.ResetTimer()
	direct, directCPU, per := temporalFloor(b, tc, floorRuns{workflowType: "ProvisionShape", prefix: "direct", n: n, await: true})
	fmt.Printf("\nmass update floor, N=%d: empty runs of Provision's shape (eager start, 4 empty local activities)\n"+
		"  started one by one by %d clients: %7.1f runs/s, CPU per run:%s\n", n, testenv.BenchClients, direct, per)
	for _, concurrency := range []int{massupdate.DefaultConcurrency, 50} {
		prefix := fmt.Sprintf("children-%d", concurrency)
		before, err := closedRuns(tc, "ProvisionShape")
		require.NoError(b, err)
		cpuBefore, start := testenv.CPU(), time.Now()
		run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "bench/" + prefix, TaskQueue: floorTaskQueue},
			"ChildrenShape", childrenInput{Prefix: prefix, To: n, Concurrency: concurrency, ContinueAfterEach: 1500})
		require.NoError(b, err)
		require.NoError(b, run.Get(context.Background(), nil))
		rate := float64(n) / time.Since(start).Seconds()
		require.Eventually(b, func() bool {
			count, err := closedRuns(tc, "ProvisionShape")
			return err == nil && count >= before+int64(n)
		}, time.Minute, 200*time.Millisecond, "visibility records the %d closed children", n)
		cpuAfter := testenv.CPU()
		fmt.Printf("  as children of one workflow, concurrency %-3d %7.1f runs/s = %.2fx the direct runs, CPU per run:%s\n",
			concurrency, rate, rate/direct, testenv.CPUPer(cpuBefore, cpuAfter, n))
		added := testenv.CPUUsed(cpuBefore, cpuAfter, n) - directCPU
		if massProvisionRate > 0 && concurrency == massupdate.DefaultConcurrency {
			// The CPU per second the provisions used is what the machine
			// gives; each update costs its own run and what a child adds.
			most := massProvisionRate * massProvisionCPU.Seconds() / (massDirectCPU + added).Seconds()
			fmt.Printf("  a child adds %.1fms of CPU; BenchmarkMassUpdate's Update runs cost %.1fms each, its provisions %.1fms at %.1f/s:\n"+
				"  at most %.1f updates/s = %.2fx provision for a mass update of children on this machine (target 0.85x)\n",
				added.Seconds()*1000, massDirectCPU.Seconds()*1000, massProvisionCPU.Seconds()*1000, massProvisionRate, most, most/massProvisionRate)
		}
	}
	b.StopTimer()
}
