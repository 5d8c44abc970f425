package workflows_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// floorTaskQueue keeps the benchmark's runs apart from any worker of the
// real workflows.
const floorTaskQueue = "temporal-floor"

// provisionShape has the shape of a fast Provision, with nothing inside:
// four local activities (begin, apply, observe, finish) that return at once.
func provisionShape(ctx workflow.Context, t lifecycle.Target) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	for range 4 {
		if err := workflow.ExecuteLocalActivity(ctx, noop, t).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func noop(context.Context, lifecycle.Target) error { return nil }

// BenchmarkTemporalFloor measures what Temporal alone costs per provision on
// the embedded default (the dev server with SQLite in a file): N runs of a
// workflow of Provision's shape, eagerly started from 16 clients with
// Provision's search attributes, each awaited to its end. Its CPU per run is
// Temporal's least share of BenchmarkProvision's (starter), as
// BenchmarkKubernetesFloor gives the API server's.
func BenchmarkTemporalFloor(b *testing.B) {
	n := testenv.BenchN()
	tc := testenv.FileTemporal(b)
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(provisionShape, workflow.RegisterOptions{Name: "ProvisionShape"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	cpuBefore := testenv.CPU()
	b.ResetTimer()
	start := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "bench", Name: fmt.Sprintf("floor-%05d", i)}
		run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID:               runs.WorkflowID(t),
			TaskQueue:        floorTaskQueue,
			EnableEagerStart: true,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				runs.AttrKind.ValueSet(string(t.Kind)), runs.AttrNamespace.ValueSet(t.Namespace),
				runs.AttrName.ValueSet(t.Name), runs.AttrOperation.ValueSet(string(lifecycle.OpProvision)),
				runs.AttrInstance.ValueSet(t.Name), runs.AttrService.ValueSet("bench"),
				runs.AttrPlan.ValueSet("one-configmap")),
		}, "ProvisionShape", t)
		if err != nil {
			return err
		}
		return run.Get(context.Background(), nil)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	// The server records each closed run in its visibility store after the
	// run ends; that work is part of the cost.
	time.Sleep(2 * time.Second) // part of the measured window, not a wait before an assertion
	cpuAfter := testenv.CPU()
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	fmt.Printf("\nTemporal floor of a provision, N=%d, %d clients (eager start, 4 empty local activities):\n"+
		"  %7.1f runs/s\n  CPU per run:%s\n", n, testenv.BenchClients, rate, testenv.CPUPer(cpuBefore, cpuAfter, n))
}
