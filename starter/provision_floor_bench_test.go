package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
)

// floorSteps are the local activities of BenchmarkProvisionFloor's
// workflow: a provision's API calls in namespace ns, with no logic.
type floorSteps struct {
	c  ctrlclient.Client
	ns string
}

// Read is Begin's read of the instance.
func (f *floorSteps) Read(ctx context.Context, t lifecycle.Target) error {
	return floorRead(ctx, f.c, f.ns, t.Name)
}

// Apply is ApplyTemplates' calls: the registry Secret, the fence's read
// and the ConfigMap's apply.
func (f *floorSteps) Apply(ctx context.Context, t lifecycle.Target) error {
	return floorApply(ctx, f.c, f.ns, t.Name, true)
}

// Finish is Finish's status patch.
func (f *floorSteps) Finish(ctx context.Context, t lifecycle.Target) error {
	return floorFinish(ctx, f.c, f.ns, t.Name)
}

// Provision has provisionShapeVersioned's shape, and its local activities
// make a provision's API calls: what a provision costs at the least with
// every part it may not skip, Kubernetes and Temporal at once. A failed
// call fails the run, so that the benchmark stops on it.
func (f *floorSteps) Provision(ctx workflow.Context, t lifecycle.Target) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	for _, step := range []any{f.Read, f.Apply, noop, f.Finish} {
		if err := workflow.ExecuteLocalActivity(ctx, step, t).Get(ctx, nil); err != nil {
			return err
		}
	}
	return operatorViewEnd(ctx)
}

// BenchmarkProvisionFloor runs the two floors of a provision together, as
// the provision runs its two halves: N sets, each the user's create of an
// instance and then a run of Provision's shape, eagerly started with its
// search attributes, whose local activities make the worker's API calls
// (the instance's read, its registry Secret, the fence's read, the
// ConfigMap's apply, the status patch), with the version marker and the
// QmState upsert; two informers watch the instances. BenchmarkKubernetesFloor
// and BenchmarkTemporalFloor each run alone on an idle machine; here the API
// server, etcd and Temporal share its two cores as they do in a provision.
// It prints BenchmarkProvision's CPU per instance on the bare API server
// against this floor and against the sum of the two floors run apart.
func BenchmarkProvisionFloor(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, ns := watchedNamespace(ctx, b, 2)
	tc := testenv.FileTemporal(b)
	steps := &floorSteps{c: kube.Client, ns: ns}
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(steps.Provision, workflow.RegisterOptions{Name: "ProvisionFloor"})
	require.NoError(b, w.Start())
	defer w.Stop()
	create := func(name string) error { return kube.Client.Create(ctx, floorInstance(ns, name)) }

	// A round of warm-up, as BenchmarkTemporalFloor's.
	temporalFloor(b, tc, "ProvisionFloor", "warm-up", testenv.BenchClients, create)
	eventsBefore := watchEvents(b, kube) // before the CPU reading, as BenchmarkKubernetesFloor's
	b.ResetTimer()
	rate, cpu, per := temporalFloor(b, tc, "ProvisionFloor", "floor", n, create)
	b.StopTimer()
	eventsAfter := watchEvents(b, kube)
	b.ReportMetric(rate, "sets/s")
	fmt.Printf("\nprovision's floor, its mandated parts run together, N=%d, %d clients (create; a run of Provision's shape whose\n"+
		"local activities read the instance, write its registry Secret, read the fence, apply the ConfigMap and patch the status;\n"+
		"the version marker and QmState):\n  %7.1f sets/s\n  CPU per set:%s\n  watch events sent per set, by resource:\n", n, testenv.BenchClients, rate, per)
	printRequestsPerInstance(eventsBefore, eventsAfter, n)
	if provisionBareCPU > 0 && kubernetesFencedCPU > 0 && temporalVersionedCPU > 0 {
		apart := kubernetesFencedCPU + temporalVersionedCPU
		ms := func(d time.Duration) float64 { return d.Seconds() * 1000 }
		fmt.Printf("  provision on the bare API server (BenchmarkProvision, this run): %.1fms per instance, %.2fx this floor\n"+
			"  the same parts run apart (BenchmarkKubernetesFloor fenced + BenchmarkTemporalFloor versioned): %.1fms;"+
			" run together they cost %+.1fms per set\n",
			ms(provisionBareCPU), provisionBareCPU.Seconds()/cpu.Seconds(), ms(apart), ms(cpu-apart))
	}
}
