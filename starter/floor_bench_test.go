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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/registry"
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
	// kubernetesFloorCPU is BenchmarkKubernetesFloor's CPU per set, and
	// kubernetesFencedCPU its CPU per set with what a provision may not
	// leave out (floorApply, floorFinish).
	kubernetesFloorCPU, kubernetesFencedCPU time.Duration
	// temporalVersionedCPU is BenchmarkTemporalFloor's CPU per run of
	// provisionShapeVersioned.
	temporalVersionedCPU time.Duration
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
// BenchmarkTemporalFloor, below, gives Temporal's share. It then makes the
// same calls with what a provision may not leave out beyond them: the
// fence's read of the object before its apply (a 404 on a first apply),
// without which a resumed worker would write a stale render over a newer
// one, and the contents a provision writes (the registry's labels and
// values, the ConfigMap's fence stamp and owner, the Ready condition).
func BenchmarkKubernetesFloor(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, ns := watchedNamespace(ctx, b, 2)

	c := kube.Client
	eventsBefore := watchEvents(b, kube) // before the CPU reading: a scrape is not part of a set
	cpuBefore := testenv.CPU()
	b.ResetTimer()
	start := time.Now()
	profiled := testenv.ProfileAPIServer(b, kube, "floor-kube-apiserver", 3)
	testenv.Parallel(b, n, func(i int) error { return provisionFloorSet(ctx, c, ns, fmt.Sprintf("floor-%05d", i), false) })
	elapsed := time.Since(start)
	b.StopTimer()
	profiled()
	cpuAfter, eventsAfter := testenv.CPU(), watchEvents(b, kube)
	rate := float64(n) / elapsed.Seconds()
	kubernetesFloorCPU = testenv.CPUUsed(cpuBefore, cpuAfter, n)
	b.ReportMetric(rate, "sets/s")
	fmt.Printf("\nKubernetes floor of a provision, N=%d, %d clients (create, get, Secret, apply, status patch):\n"+
		"  %7.1f sets/s\n  CPU per set:%s\n  watch events sent per set, by resource:\n", n, testenv.BenchClients, rate, testenv.CPUPer(cpuBefore, cpuAfter, n))
	printRequestsPerInstance(eventsBefore, eventsAfter, n)

	cpuBefore = testenv.CPU()
	start = time.Now()
	testenv.Parallel(b, n, func(i int) error { return provisionFloorSet(ctx, c, ns, fmt.Sprintf("fenced-%05d", i), true) })
	rate = float64(n) / time.Since(start).Seconds()
	cpuAfter = testenv.CPU()
	kubernetesFencedCPU = testenv.CPUUsed(cpuBefore, cpuAfter, n)
	fmt.Printf("  with the fence's read and the contents a provision writes: %7.1f sets/s\n  CPU per set:%s\n", rate, testenv.CPUPer(cpuBefore, cpuAfter, n))
}

// provisionFloorSet makes the API calls of one provision of the
// one-configmap plan, for instance name in ns, with no logic in between;
// mandated adds what a provision may not leave out (floorApply,
// floorFinish).
func provisionFloorSet(ctx context.Context, c ctrlclient.Client, ns, name string, mandated bool) error {
	if err := c.Create(ctx, floorInstance(ns, name)); err != nil {
		return err
	}
	if err := floorRead(ctx, c, ns, name); err != nil {
		return err
	}
	if err := floorApply(ctx, c, ns, name, mandated); err != nil {
		return err
	}
	return floorFinish(ctx, c, ns, name, mandated)
}

// floorInstance is the instance a floor set creates.
func floorInstance(ns, name string) *osbv1alpha1.SFServiceInstance {
	return &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "bench", PlanID: "one-configmap"},
	}
}

// floorRead is the worker's read of the instance.
func floorRead(ctx context.Context, c ctrlclient.Client, ns, name string) error {
	return c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, &osbv1alpha1.SFServiceInstance{})
}

// floorApply writes the instance's registry Secret and applies its
// ConfigMap. mandated adds what a provision may not leave out: the fence's
// read of the ConfigMap's metadata before its apply (a 404 on a first
// apply), and the contents a provision writes: the registry's labels, type
// and values; the ConfigMap's fence stamp and its owner, the registry
// Secret, by which the garbage collector removes it.
func floorApply(ctx context.Context, c ctrlclient.Client, ns, name string, mandated bool) error {
	registrySecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "qm-instance-" + name, Namespace: ns},
		Data:       map[string][]byte{"instance-id": []byte(`"` + name + `"`)},
	}
	if mandated {
		registrySecret.Labels = map[string]string{registry.Label: "instance", "quartermaster.io/instance": name}
		registrySecret.Type = registry.SecretType
		registrySecret.Data["namespace"] = []byte(`"` + ns + `"`)
		registrySecret.Data["plan-id"] = []byte(`"one-configmap"`)
		registrySecret.Data["service-id"] = []byte(`"bench"`)
	}
	if err := c.Create(ctx, registrySecret); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string]string{"plan": "one-configmap"},
	}
	if mandated {
		cm.Annotations = map[string]string{apply.RenderedAnnotation: string(registrySecret.UID) + "/1/1"}
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: registrySecret.Name, UID: registrySecret.UID, Controller: ptr.To(true)}}
		live := &metav1.PartialObjectMetadata{TypeMeta: cm.TypeMeta}
		if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(cm), live); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the fence's read of a new ConfigMap: want a 404, got %v", err)
		}
	}
	return c.Patch(ctx, cm, ctrlclient.Apply, ctrlclient.FieldOwner("qm"), ctrlclient.ForceOwnership)
}

// floorFinish patches the instance's final status: the same merge patch as
// a patch from the instance as read, without the read (its generation is
// a new instance's, 1). mandated adds the rest of what a provision
// writes: the plan generation applied and the Ready condition.
func floorFinish(ctx context.Context, c ctrlclient.Client, ns, name string, mandated bool) error {
	inst := floorInstance(ns, name)
	base := inst.DeepCopy()
	inst.Status.State = osbv1alpha1.StateSucceeded
	inst.Status.ObservedGeneration = 1
	inst.Status.Resources = []osbv1alpha1.Source{{APIVersion: "v1", Kind: "ConfigMap", Name: name, Namespace: ns}}
	inst.Status.AppliedSpec = inst.Spec.DeepCopy()
	if mandated {
		inst.Status.AppliedPlanGeneration = 1
		meta.SetStatusCondition(&inst.Status.Conditions, metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue,
			ObservedGeneration: 1, Reason: lifecycle.ReadyReason(lifecycle.OpProvision, osbv1alpha1.StateSucceeded)})
	}
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

// provisionShapeVersioned adds to provisionShape what Provision's last
// step may not skip: the operator view's version marker (with the SDK's
// TemporalChangeVersion upsert) and the QmState search attribute that the
// Temporal UI's lists filter on.
func provisionShapeVersioned(ctx workflow.Context, t lifecycle.Target) error {
	if err := provisionShape(ctx, t); err != nil {
		return err
	}
	return operatorViewEnd(ctx)
}

// operatorViewEnd is what Provision's last step may not skip: the operator
// view's version marker and the QmState upsert.
func operatorViewEnd(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, "operator-view", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	return workflow.UpsertTypedSearchAttributes(ctx, runs.AttrState.ValueSet(string(osbv1alpha1.StateSucceeded)))
}

func noop(context.Context, lifecycle.Target) error { return nil }

// BenchmarkTemporalFloor measures what Temporal alone costs per provision on
// the embedded default (the dev server with SQLite in a file): N runs of a
// workflow of Provision's shape, eagerly started from 16 clients with
// Provision's search attributes, each awaited to its end. Its CPU per run is
// Temporal's least share of BenchmarkProvision's, as
// BenchmarkKubernetesFloor gives the API server's. It then runs the shape
// with what Provision may not skip (provisionShapeVersioned, and the
// summary and details the Temporal UI shows of each run).
// With both floors, it prints BenchmarkProvision's CPU per instance on the
// bare API server against their sum: the floors, and the floors with
// the mandated parts.
func BenchmarkTemporalFloor(b *testing.B) {
	n := testenv.BenchN()
	tc := testenv.FileTemporal(b)
	w := sdkworker.New(tc, floorTaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(provisionShape, workflow.RegisterOptions{Name: "ProvisionShape"})
	w.RegisterWorkflowWithOptions(provisionShapeVersioned, workflow.RegisterOptions{Name: "ProvisionShapeVersioned"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	// A round of warm-up, so that neither measured shape pays for the
	// server's first runs.
	temporalFloor(b, tc, floorRuns{workflowType: "ProvisionShapeVersioned", prefix: "warm-up", n: testenv.BenchClients, operatorView: true})
	b.ResetTimer()
	rate, temporalCPU, per := temporalFloor(b, tc, floorRuns{workflowType: "ProvisionShape", prefix: "shape", n: n})
	b.StopTimer()
	b.ReportMetric(rate, "runs/s")
	fmt.Printf("\nTemporal floor of a provision, N=%d, %d clients (eager start, 4 empty local activities):\n"+
		"  %7.1f runs/s\n  CPU per run:%s\n", n, testenv.BenchClients, rate, per)
	rate, versionedCPU, versionedPer := temporalFloor(b, tc, floorRuns{workflowType: "ProvisionShapeVersioned", prefix: "versioned", n: n, operatorView: true})
	temporalVersionedCPU = versionedCPU
	fmt.Printf("  with the operator view (version marker, QmState upsert, summary and details): %7.1f runs/s\n  CPU per run:%s\n", rate, versionedPer)
	if provisionBareCPU > 0 && kubernetesFloorCPU > 0 {
		floors, mandated := kubernetesFloorCPU+temporalCPU, kubernetesFencedCPU+versionedCPU
		ms := func(d time.Duration) float64 { return d.Seconds() * 1000 }
		fmt.Printf("  provision on the bare API server (BenchmarkProvision, this run): %.1fms per instance\n"+
			"  the issue's floors, Kubernetes %.1fms + Temporal %.1fms = %.1fms\n%s"+
			"  the floors with the parts a provision may not skip (the fence's read and the contents it writes; the operator view), %.1fms + %.1fms = %.1fms: %.2fx\n",
			ms(provisionBareCPU), ms(kubernetesFloorCPU), ms(temporalCPU), ms(floors),
			testenv.BenchVerdict("a provision's CPU over the sum of its floors", provisionBareCPU.Seconds()/floors.Seconds(), 1.15, "x", true),
			ms(kubernetesFencedCPU), ms(versionedCPU), ms(mandated), provisionBareCPU.Seconds()/mandated.Seconds())
	}
}

// floorRuns are the runs temporalFloor starts: n of workflowType, named
// from prefix.
type floorRuns struct {
	workflowType, prefix string
	n                    int
	// create, unless nil, is called with each run's instance name before
	// its start.
	create func(name string) error
	// operatorView starts each run with a summary and details of the size
	// the watcher gives a provision's, which the Temporal UI shows.
	operatorView bool
	// await has each client wait for its run's end before its next start,
	// as BenchmarkMassUpdate's floor does with the Update runs.
	await bool
}

// temporalFloor starts r's runs eagerly from 16 clients with Provision's
// search attributes, and waits until visibility records them completed.
// It returns their rate and the machine's CPU per run, visibility's work
// on the closed runs included, in all and by process.
func temporalFloor(b *testing.B, tc client.Client, r floorRuns) (float64, time.Duration, string) {
	workflowType, n := r.workflowType, r.n
	before, err := closedRuns(tc, workflowType)
	require.NoError(b, err)
	cpuBefore := testenv.CPU()
	start := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		t := lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: "bench", Name: fmt.Sprintf("%s-%05d", r.prefix, i)}
		if r.create != nil {
			if err := r.create(t.Name); err != nil {
				return err
			}
		}
		var summary, details string
		if r.operatorView {
			summary = fmt.Sprintf("provision %s/%s: plan one-configmap (bench)", t.Namespace, t.Name)
			details = fmt.Sprintf("SFServiceInstance %s/%s\n\n- instance ID: `%s`\n- service: bench (`bench`)\n- plan: one-configmap (`one-configmap`)\n\n"+
				"`kubectl get sfserviceinstance %s -n %s`", t.Namespace, t.Name, t.Name, t.Name, t.Namespace)
		}
		run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID:               runs.WorkflowID(t),
			TaskQueue:        floorTaskQueue,
			EnableEagerStart: true,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				runs.AttrKind.ValueSet(string(t.Kind)), runs.AttrNamespace.ValueSet(t.Namespace),
				runs.AttrName.ValueSet(t.Name), runs.AttrOperation.ValueSet(string(lifecycle.OpProvision)),
				runs.AttrInstance.ValueSet(t.Name), runs.AttrService.ValueSet("bench"),
				runs.AttrPlan.ValueSet("one-configmap")),
			StaticSummary: summary,
			StaticDetails: details,
		}, workflowType, t)
		if err != nil || !r.await {
			return err
		}
		return run.Get(context.Background(), nil)
	})
	// Unless r.await, no client awaits a run: nothing in a provision waits
	// on a run's result through Temporal (users watch the resource), and a
	// long poll for each run's end is a request no provision makes. The
	// server records each closed run in its visibility store after the run
	// ends; that work is part of the cost, so the window closes once every
	// run is found there completed. A run that fails never is, and the
	// benchmark fails.
	require.Eventually(b, func() bool {
		count, err := closedRuns(tc, workflowType)
		return err == nil && count >= before+int64(n)
	}, 2*time.Minute, 100*time.Millisecond, "visibility records the %d runs of %s completed", n, workflowType)
	rate := float64(n) / time.Since(start).Seconds()
	cpuAfter := testenv.CPU()
	return rate, testenv.CPUUsed(cpuBefore, cpuAfter, n), testenv.CPUPer(cpuBefore, cpuAfter, n)
}

// closedRuns counts the completed runs of workflowType that visibility has
// recorded.
func closedRuns(tc client.Client, workflowType string) (int64, error) {
	resp, err := tc.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Completed' AND TaskQueue = %q", workflowType, floorTaskQueue),
	})
	return resp.GetCount(), err
}
