package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// The floors of a provision, what BenchmarkProvision's pipeline costs at
// the least: its API calls with no logic between them, and a workflow of
// its shape with nothing inside. They run after BenchmarkProvision, in the
// same binary, so that its verdict compares figures of one run.
var (
	// provisionBareCPU is BenchmarkProvision's CPU per instance on the bare
	// API server, the floors' own.
	provisionBareCPU time.Duration
	// kubernetesFloorCPU is BenchmarkKubernetesFloor's CPU per set.
	kubernetesFloorCPU time.Duration
)

// floorTaskQueue keeps BenchmarkTemporalFloor's runs apart from any worker
// of the real workflows.
const floorTaskQueue = "temporal-floor"

// BenchmarkKubernetesFloor makes, with no Temporal and no logic in between,
// the API calls that BenchmarkProvision's pipeline makes per instance: the
// user's create, the worker's read of the instance, its registry Secret, the
// applied ConfigMap and the final status patch, from the same 16 clients
// while two informers watch the instances (the watcher's and the
// benchmark's). Its CPU per set is what the API server, etcd and their
// clients cost at the least for one provision of the one-ConfigMap plan;
// BenchmarkTemporalFloor, below, gives Temporal's share.
func BenchmarkKubernetesFloor(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, ns := watchedNamespace(ctx, b, 2)

	c := kube.Client
	cpuBefore := testenv.CPU()
	b.ResetTimer()
	start := time.Now()
	profiled := testenv.ProfileAPIServer(b, kube, "floor-kube-apiserver", 3)
	testenv.Parallel(b, n, func(i int) error { return provisionFloorSet(ctx, c, ns, fmt.Sprintf("floor-%05d", i)) })
	elapsed := time.Since(start)
	b.StopTimer()
	profiled()
	cpuAfter := testenv.CPU()
	rate := float64(n) / elapsed.Seconds()
	kubernetesFloorCPU = testenv.CPUUsed(cpuBefore, cpuAfter, n)
	b.ReportMetric(rate, "sets/s")
	fmt.Printf("\nKubernetes floor of a provision, N=%d, %d clients (create, get, Secret, apply, status patch):\n"+
		"  %7.1f sets/s\n  CPU per set:%s\n", n, testenv.BenchClients, rate, testenv.CPUPer(cpuBefore, cpuAfter, n))
}

// provisionFloorSet makes the API calls of one provision of the
// one-configmap plan, for instance name in ns, with no logic in between.
func provisionFloorSet(ctx context.Context, c ctrlclient.Client, ns, name string) error {
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "bench", PlanID: "one-configmap"},
	}
	if err := c.Create(ctx, inst); err != nil {
		return err
	}
	if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), inst); err != nil {
		return err
	}
	registry := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "qm-instance-" + name, Namespace: ns},
		Data:       map[string][]byte{"instance-id": []byte(`"` + name + `"`)},
	}
	if err := c.Create(ctx, registry); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string]string{"plan": "one-configmap"},
	}
	if err := c.Patch(ctx, cm, ctrlclient.Apply, ctrlclient.FieldOwner("qm"), ctrlclient.ForceOwnership); err != nil {
		return err
	}
	base := inst.DeepCopy()
	inst.Status.State = osbv1alpha1.StateSucceeded
	inst.Status.ObservedGeneration = inst.Generation
	inst.Status.Resources = []osbv1alpha1.Source{{APIVersion: "v1", Kind: "ConfigMap", Name: name, Namespace: ns}}
	inst.Status.AppliedSpec = inst.Spec.DeepCopy()
	return c.Status().Patch(ctx, inst, ctrlclient.MergeFrom(base))
}

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
// Temporal's least share of BenchmarkProvision's, as
// BenchmarkKubernetesFloor gives the API server's; with both, it prints
// BenchmarkProvision's CPU per instance on the bare API server against
// their sum.
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
	// run ends; that work is part of the cost, so the window closes once
	// every run is found there.
	closed := fmt.Sprintf("WorkflowType = 'ProvisionShape' AND ExecutionStatus = 'Completed' AND TaskQueue = %q", floorTaskQueue)
	require.Eventually(b, func() bool {
		resp, err := tc.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: closed})
		return err == nil && resp.GetCount() >= int64(n)
	}, time.Minute, 200*time.Millisecond, "visibility records the %d closed runs", n)
	cpuAfter := testenv.CPU()
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	fmt.Printf("\nTemporal floor of a provision, N=%d, %d clients (eager start, 4 empty local activities):\n"+
		"  %7.1f runs/s\n  CPU per run:%s\n", n, testenv.BenchClients, rate, testenv.CPUPer(cpuBefore, cpuAfter, n))
	if provisionBareCPU > 0 && kubernetesFloorCPU > 0 {
		floors := kubernetesFloorCPU + testenv.CPUUsed(cpuBefore, cpuAfter, n)
		fmt.Printf("  provision on the bare API server (BenchmarkProvision, this run): %.1fms per instance; the floors, Kubernetes %.1fms + Temporal %.1fms = %.1fms\n%s",
			provisionBareCPU.Seconds()*1000, kubernetesFloorCPU.Seconds()*1000, (floors-kubernetesFloorCPU).Seconds()*1000, floors.Seconds()*1000,
			testenv.BenchVerdict("a provision's CPU over the sum of its floors", provisionBareCPU.Seconds()/floors.Seconds(), 1.15, "x", true))
	}
}
