package starter_test

import (
	"context"
	"fmt"
	"slices"
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
// and the ConfigMap's apply, with the contents a provision writes.
func (f *floorSteps) Apply(ctx context.Context, t lifecycle.Target) error {
	return floorApply(ctx, f.c, f.ns, t.Name, true)
}

// Finish is Finish's status patch.
func (f *floorSteps) Finish(ctx context.Context, t lifecycle.Target) error {
	return floorFinish(ctx, f.c, f.ns, t.Name, true)
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
// the provision runs its two halves, in rounds that alternate with bursts
// of provisions, so that the ratio of the two is taken over the same
// minutes of a shared, noisy machine. A set of the floor is the user's
// create of an instance and then a run of Provision's shape, eagerly
// started with its search attributes, whose local activities make the
// worker's API calls (the instance's read, its registry Secret, the
// fence's read, the ConfigMap's apply, the status patch, each with the
// contents a provision writes), with the operator view (the version marker,
// the QmState upsert, the summary and details); two informers watch the
// instances, as the watcher's and the benchmark's watch the provision's.
// BenchmarkKubernetesFloor and BenchmarkTemporalFloor each run alone on an
// idle machine; here the API server, etcd and Temporal share its two cores
// as they do in a provision. The provisions run on the bare API server and
// a file-backed dev server, the floor on others of its own, all alive
// throughout: each window's CPU counts the other side's idle servers too,
// alike in both as the two run at about the same rate. As the provision's
// 16 clients create and move on, the floor's create, start and move on:
// neither waits for its sets one by one, so that the servers batch as many
// operations in both. It prints each
// round, and the median of the rounds' ratios against the target.
func BenchmarkProvisionFloor(b *testing.B) {
	n, rounds := testenv.BenchN(), 5
	if testenv.BenchSmoke() {
		rounds = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The provisions' system, as BenchmarkProvision's on the bare API server.
	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, Concurrency: 64, FileTemporal: true, Bare: true})
	planID := s.Plan("one-configmap", "", testenv.Templates("one-configmap"))
	tr := track(ctx, b, s.Kube.Config, s.Namespace)
	newInstance := instancesOf(s, planID)

	// The floor's: an API server of its own, or the watcher would take its
	// instances for provisions to run.
	kube := testenv.StartSister(b, 0).Cluster
	ns := watchedNamespaceOf(ctx, b, kube, 2)
	tc := testenv.FileTemporal(b)
	steps := &floorSteps{c: kube.Client, ns: ns}
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(steps.Provision, workflow.RegisterOptions{Name: "ProvisionFloor"})
	require.NoError(b, w.Start())
	defer w.Stop()
	create := func(name string) error { return kube.Client.Create(ctx, floorInstance(ns, name)) }

	// A round of warm-up of each.
	tr.burst(b, s.Kube.Client, testenv.BenchClients, "warm-up", newInstance)
	temporalFloor(b, tc, floorRuns{workflowType: "ProvisionFloor", prefix: "warm-up", n: testenv.BenchClients, create: create, operatorView: true})

	fmt.Printf("\nprovision against its floor run together (create; a run of Provision's shape whose local activities make the\n"+
		"worker's API calls, with the contents a provision writes; the operator view), N=%d, %d clients, %d rounds;\n"+
		"both sides' servers alive throughout, and counted in every window:\n", n, testenv.BenchClients, rounds)
	eventsBefore := watchEvents(b, kube)
	var ratios []float64
	for r := range rounds {
		burst := tr.burst(b, s.Kube.Client, n, fmt.Sprintf("round%d", r), newInstance)
		rate, cpu, per := temporalFloor(b, tc, floorRuns{workflowType: "ProvisionFloor", prefix: fmt.Sprintf("round%d", r), n: n, create: create, operatorView: true})
		ratios = append(ratios, burst.cpuPer.Seconds()/cpu.Seconds())
		fmt.Printf("  round %d: provision %5.1f/s, CPU per instance:%s\n           floor     %5.1f/s, CPU per set:     %s\n           %.2fx\n",
			r+1, burst.throughput, testenv.CPUPer(burst.cpuBefore, burst.cpuAfter, n), rate, per, ratios[r])
	}
	b.StopTimer()
	fmt.Println("  the floor's watch events sent per set, by resource:")
	printRequestsPerInstance(eventsBefore, watchEvents(b, kube), n*rounds)
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	b.ReportMetric(median, "provision/floor-cpu")
	fmt.Print(testenv.BenchVerdict("a provision's CPU over its floor run together, the median of the rounds", median, 1.15, "x", true))
}
