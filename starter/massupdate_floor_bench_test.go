package starter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
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

// floorBatch is one batch of batchesShape: the runs From..To-1.
type floorBatch struct {
	Prefix   string
	From, To int
}

// batchesShape has the shape of MassUpdate with nothing inside: it runs
// empty runs of Provision's shape at most Concurrency at a time, in batches
// of massupdate.BatchSize, each an activity (startAndAwait) that starts its
// runs through the client and waits for them, and continues as new when
// Temporal suggests it or after ContinueAfterEach batches, letting those in
// flight end first.
func batchesShape(ctx workflow.Context, in childrenInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Hour, HeartbeatTimeout: 10 * time.Second})
	sel := workflow.NewSelector(ctx)
	inFlight, batches := 0, 0
	draining := false
	for in.From < in.To || inFlight > 0 {
		for !draining && inFlight < in.Concurrency && in.From < in.To {
			size := min(massupdate.BatchSize(in.Concurrency), in.Concurrency-inFlight, in.To-in.From)
			batch := floorBatch{Prefix: in.Prefix, From: in.From, To: in.From + size}
			sel.AddFuture(workflow.ExecuteActivity(ctx, "StartAndAwait", batch), func(f workflow.Future) {
				inFlight -= size
				if err := f.Get(ctx, nil); err != nil {
					workflow.GetLogger(ctx).Error("a batch failed", "error", err)
				}
			})
			in.From += size
			inFlight += size
			if batches++; batches >= in.ContinueAfterEach || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				draining = true
			}
		}
		if draining && inFlight == 0 && in.From < in.To {
			return workflow.NewContinueAsNewError(ctx, "BatchesShape", in)
		}
		sel.Select(ctx)
	}
	return nil
}

// startAndAwait is batchesShape's UpdateInstances: it starts a batch's
// empty runs eagerly, with the Update runs' search attributes, and waits
// for them all.
func startAndAwait(tc client.Client) func(context.Context, floorBatch) error {
	return func(ctx context.Context, b floorBatch) error {
		var started []client.WorkflowRun
		for i := b.From; i < b.To; i++ {
			t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "bench", Name: fmt.Sprintf("%s-%05d", b.Prefix, i)}
			opts := runs.OperationOptions(t, lifecycle.OpUpdate, "", "", runs.AttrPlan.ValueSet("one-configmap"))
			opts.TaskQueue = floorTaskQueue
			run, err := tc.ExecuteWorkflow(ctx, opts, "ProvisionShape", t)
			if err != nil {
				return err
			}
			started = append(started, run)
		}
		for _, run := range started {
			if err := run.Get(ctx, nil); err != nil {
				return err
			}
		}
		return nil
	}
}

// BenchmarkMassUpdateFloor measures what a mass update's way of running
// updates costs in itself on the embedded default's dev server (SQLite in
// a file): N empty runs of Provision's shape started one by one from 16
// clients, as BenchmarkMassUpdate's floor starts the Update runs; then the
// same runs as the children of one workflow of the mass update's shape,
// MassUpdate's way before batches, at the default concurrency; then in
// batches from one workflow, MassUpdate's way now, at the default
// concurrency and at 50. Each way's rate over the direct runs' is the most
// a mass update built that way can reach of its own floor, with no
// Kubernetes in either. What a way adds in CPU per run, added to the CPU
// per update of BenchmarkMassUpdate's floor, gives the most a mass update
// built that way can reach on the CPU the provisions of that run used.
func BenchmarkMassUpdateFloor(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_MASS", 10000)
	tc := testenv.FileTemporal(b)
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(provisionShape, workflow.RegisterOptions{Name: "ProvisionShape"})
	w.RegisterWorkflowWithOptions(childrenShape, workflow.RegisterOptions{Name: "ChildrenShape"})
	w.RegisterWorkflowWithOptions(batchesShape, workflow.RegisterOptions{Name: "BatchesShape"})
	w.RegisterActivityWithOptions(startAndAwait(tc), activity.RegisterOptions{Name: "StartAndAwait"})
	require.NoError(b, w.Start())
	defer w.Stop()

	b.ResetTimer()
	direct, directCPU, per := temporalFloor(b, tc, floorRuns{workflowType: "ProvisionShape", prefix: "direct", n: n, await: true})
	fmt.Printf("\nmass update floor, N=%d: empty runs of Provision's shape (eager start, 4 empty local activities)\n"+
		"  started one by one by %d clients: %7.1f runs/s, CPU per run:%s\n", n, testenv.BenchClients, direct, per)
	for _, way := range []struct {
		name, workflowType string
		concurrency        int
	}{
		{"as children of one workflow (before batches)", "ChildrenShape", massupdate.DefaultConcurrency},
		{"in batches from one workflow (MassUpdate's)", "BatchesShape", massupdate.DefaultConcurrency},
		{"in batches from one workflow (MassUpdate's)", "BatchesShape", 50},
	} {
		prefix := fmt.Sprintf("%s-%d", strings.ToLower(way.workflowType), way.concurrency)
		before, err := closedRuns(tc, "ProvisionShape")
		require.NoError(b, err)
		cpuBefore, start := testenv.CPU(), time.Now()
		run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "bench/" + prefix, TaskQueue: floorTaskQueue},
			way.workflowType, childrenInput{Prefix: prefix, To: n, Concurrency: way.concurrency, ContinueAfterEach: 1500})
		require.NoError(b, err)
		require.NoError(b, run.Get(context.Background(), nil))
		rate := float64(n) / time.Since(start).Seconds()
		require.Eventually(b, func() bool {
			count, err := closedRuns(tc, "ProvisionShape")
			return err == nil && count >= before+int64(n)
		}, time.Minute, 200*time.Millisecond, "visibility records the %d closed runs", n)
		cpuAfter := testenv.CPU()
		fmt.Printf("  %s, concurrency %-3d %7.1f runs/s = %.2fx the direct runs, CPU per run:%s\n",
			way.name, way.concurrency, rate, rate/direct, testenv.CPUPer(cpuBefore, cpuAfter, n))
		added := testenv.CPUUsed(cpuBefore, cpuAfter, n) - directCPU
		if massProvisionRate > 0 {
			// The CPU per second the provisions used is what the machine
			// gives; each update costs its own run and what its way adds.
			most := massProvisionRate * massProvisionCPU.Seconds() / (massDirectCPU + added).Seconds()
			fmt.Printf("    it adds %+.1fms of CPU per run to the direct run; BenchmarkMassUpdate's Update runs cost %.1fms each, its provisions %.1fms at %.1f/s:\n"+
				"    at most %.1f updates/s = %.2fx provision for a mass update built so on this machine (target 0.85x)\n",
				added.Seconds()*1000, massDirectCPU.Seconds()*1000, massProvisionCPU.Seconds()*1000, massProvisionRate, most, most/massProvisionRate)
		}
	}
	b.StopTimer()
}
