package starter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/testenv"
)

// clusterRuns are BenchmarkProvisionClusters' runs, in the order they run.
var clusterRuns = []struct {
	name, title string
}{
	{"one", "one cluster, default scheduler"},
	{"least-utilized", "3 sister clusters, least-utilized"},
	{"assigned", "3 sister clusters, spec.clusterId set"},
}

// BenchmarkProvisionClusters measures, in one run, the provision of N
// one-ConfigMap instances (QM_BENCH_N, default 1000) from 16 clients:
//
//   - into the one cluster Quartermaster runs in, with no scheduler;
//   - into three sister clusters under least-utilized, each instance
//     scheduled first;
//   - into the same three, with each instance's spec.clusterId set by its
//     creator, so that nothing is scheduled.
//
// Every cluster is a bare API server with its etcd, so that the runs
// differ only in where the objects go and in the scheduling step. The last
// two runs differ only in the scheduling step: the difference of their CPU
// per instance is its cost, every process included (Temporal's activity,
// the ledger's and the instance's writes, the Event). The sisters start
// after the first run, so as not to idle through it.
func BenchmarkProvisionClusters(b *testing.B) {
	var sisters []*testenv.Sister
	figures := map[string]burstFigures{}
	for _, run := range clusterRuns {
		if run.name != "one" && sisters == nil {
			for range 3 {
				sisters = append(sisters, testenv.StartSister(b, 0))
			}
		}
		b.Run("clusters="+run.name, func(b *testing.B) {
			figures[run.name] = benchClusters(b, run.name, sisters)
		})
	}
	n := testenv.BenchN()
	fmt.Printf("\nprovision over clusters, N=%d, %d clients, one run:\n", n, testenv.BenchClients)
	for _, run := range clusterRuns {
		f := figures[run.name]
		fmt.Printf("  %-40s %7.1f instances/s (%.2fx one cluster), CPU %6.1fms per instance:%s\n", run.title, f.throughput,
			f.throughput/figures["one"].throughput, f.cpuPer.Seconds()*1000, testenv.CPUPer(f.cpuBefore, f.cpuAfter, n))
	}
	scheduled, assigned := figures["least-utilized"], figures["assigned"]
	if scheduled.cpuPer > 0 {
		step := scheduled.cpuPer - assigned.cpuPer
		scheduledCPU, schedulingStep = scheduled.cpuPer, step
		share := 100 * step.Seconds() / scheduled.cpuPer.Seconds()
		fmt.Printf("  the scheduling step: %.1fms of CPU per instance, %.1f%% of a scheduled provision's %.1fms\n%s",
			step.Seconds()*1000, share, scheduled.cpuPer.Seconds()*1000,
			testenv.BenchVerdict("the scheduling step's share of a scheduled provision's CPU", share, 10, "%", true))
	}
}

// benchClusters provisions N instances the way run says, checks where they
// went, and returns the burst's figures.
func benchClusters(b *testing.B, run string, sisters []*testenv.Sister) burstFigures {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parts := testenv.Parts{Worker: true, Watcher: true, Concurrency: 64, FileTemporal: true, Bare: true}
	if run != "one" {
		parts.Scheduler = scheduling.LeastUtilized
	}
	s := testenv.Start(b, parts)
	names := make([]string, len(sisters))
	for i, sister := range sisters {
		names[i] = fmt.Sprintf("eu-%d", i+1)
		register(b, s, names[i], sister.Kubeconfig, nil)
		waitCluster(b, s, names[i], "ready", func(c *resourcev1alpha1.SFCluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, "Ready")
		})
	}
	planID := s.Plan("one-configmap", "", testenv.Templates("one-configmap"))
	tr := track(ctx, b, s.Kube.Config, s.Namespace)
	var created atomic.Int64
	requestsBefore := apiRequests(b, s.Kube)
	f := tr.burst(b, s.Kube.Client, n, "burst", func(name string) *osbv1alpha1.SFServiceInstance {
		inst := instancesOf(s, planID)(name)
		if run == "assigned" {
			inst.Spec.ClusterID = names[int(created.Add(1))%len(names)]
		}
		return inst
	})
	fmt.Printf("\n%s: API requests per instance to the cluster Quartermaster runs in:\n", run)
	printRequestsPerInstance(requestsBefore, apiRequests(b, s.Kube), n)
	b.ReportMetric(f.throughput, "instances/s")
	b.ReportMetric(f.cpuPer.Seconds()*1000, "cpu-ms/instance")
	if run == "one" {
		return f
	}

	// Each instance's ConfigMap is in the cluster its spec names (a bare
	// API server has no ConfigMaps of its own); least-utilized spread them
	// evenly.
	var insts osbv1alpha1.SFServiceInstanceList
	require.NoError(b, s.Kube.Client.List(ctx, &insts, ctrlclient.InNamespace(s.Namespace)))
	on := map[string]int{}
	for _, in := range insts.Items {
		on[in.Spec.ClusterID]++
	}
	for i, sister := range sisters {
		var cms corev1.ConfigMapList
		require.NoError(b, sister.Client.List(ctx, &cms, ctrlclient.InNamespace(s.Namespace)))
		assert.Len(b, cms.Items, on[names[i]], "%s holds the ConfigMaps of its instances", names[i])
		assert.InDelta(b, n/len(sisters), on[names[i]], 1, "%s's share of %d under %s: %v", names[i], n, run, on)
	}
	fmt.Printf("  %s placed %v\n", run, on)
	return f
}

// BenchmarkSchedulingFloor makes, with no Temporal and no decision, the
// writes the issue requires of each scheduling decision: the cluster
// written into the instance's spec, the Scheduled condition into its
// status, and an Event, for N instances (QM_BENCH_N) from 16 clients,
// while three informers watch the instances as in BenchmarkProvisionClusters
// (the watcher's, the scheduler's and the benchmark's). Its CPU per
// instance is the least the scheduling step can cost on this machine.
func BenchmarkSchedulingFloor(b *testing.B) {
	n := testenv.BenchN()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, ns := watchedNamespace(ctx, b, 3)
	c := kube.Client
	insts := make([]*osbv1alpha1.SFServiceInstance, n)
	testenv.Parallel(b, n, func(i int) error {
		insts[i] = &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("floor-%05d", i), Namespace: ns},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "bench", PlanID: "one-configmap"},
		}
		return c.Create(ctx, insts[i])
	})

	cpuBefore := testenv.CPU()
	b.ResetTimer()
	start := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		inst := insts[i]
		cluster := fmt.Sprintf("eu-%d", i%3+1)
		base := inst.DeepCopy()
		inst.Spec.ClusterID = cluster
		if err := c.Patch(ctx, inst, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		base = inst.DeepCopy()
		why := "scheduled on " + cluster + ": 0 instances (eu-2: another fits better: 1 instances; eu-3: another fits better: 1 instances)"
		meta.SetStatusCondition(&inst.Status.Conditions, metav1.Condition{Type: "Scheduled", Status: metav1.ConditionTrue,
			Reason: "Scheduled", Message: why, ObservedGeneration: inst.Generation})
		if err := c.Status().Patch(ctx, inst, ctrlclient.MergeFrom(base)); err != nil {
			return err
		}
		return c.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: inst.Name + ".", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{APIVersion: "osb.servicefabrik.io/v1alpha1", Kind: "SFServiceInstance", Namespace: ns, Name: inst.Name, UID: inst.UID},
			Reason:         "Scheduled", Message: why, Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "qm-worker"}, Count: 1,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
		})
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cpuAfter := testenv.CPU()
	floor := testenv.CPUUsed(cpuBefore, cpuAfter, n)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "decisions/s")
	fmt.Printf("\nscheduling floor, N=%d, %d clients (spec patch, status patch, Event; no decision, no Temporal):\n"+
		"  %7.1f sets/s\n  CPU per set:%s\n", n, testenv.BenchClients, float64(n)/elapsed.Seconds(), testenv.CPUPer(cpuBefore, cpuAfter, n))
	if scheduledCPU > 0 {
		fmt.Printf("  that is %.1f%% of a scheduled provision's %.1fms (BenchmarkProvisionClusters, this run); the step itself cost %.1fms\n%s",
			100*floor.Seconds()/scheduledCPU.Seconds(), scheduledCPU.Seconds()*1000, schedulingStep.Seconds()*1000,
			testenv.BenchVerdict("the scheduling step over its floor", schedulingStep.Seconds()/floor.Seconds(), 1.5, "x", true))
	}
}

// scheduledCPU and schedulingStep are BenchmarkProvisionClusters' CPU per
// scheduled provision and its scheduling step's share, for
// BenchmarkSchedulingFloor, which runs after it, to compare with.
var scheduledCPU, schedulingStep time.Duration
