package starter_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// healthCheckBudget is what the health checks may cost per service, in
// cores: their target of 0.5 core for 50,000 services checked every
// minute (BenchmarkHealthChecks). The drift checks are held to the same
// per instance.
const healthCheckBudget = 0.5 / 50000

// BenchmarkDriftChecks provisions N instances (QM_BENCH_DRIFT, default
// 10,000) of a plan whose objects (a ConfigMap and a Service) are checked
// for drift every ten minutes, on the API server alone and a file-backed
// Temporal. Once every instance has succeeded and the provisions' writes
// have stopped, it measures steady state until each instance has been
// checked once (about a period), none drifted: the CPU of Quartermaster
// and Temporal in cores, and the API server's reads and writes. The target: no more CPU per instance than the health checks'
// budget per service (0.5 core for 50,000 services), so at most 0.1 core
// at 10,000; and no write at all (the watcher's lease renewals aside).
// Run it with `make bench`.
func BenchmarkDriftChecks(b *testing.B) {
	n := testenv.BenchSize("QM_BENCH_DRIFT", 10000)
	period := 10 * time.Minute
	if testenv.BenchSmoke() {
		period = 10 * time.Second
	}
	// The same rate of checks with fewer instances, for a shorter run:
	// QM_BENCH_DRIFT=2000 QM_BENCH_DRIFT_EVERY=2m checks as often as
	// 10,000 every ten minutes (a pass lists fewer instances, though).
	if every, err := time.ParseDuration(os.Getenv("QM_BENCH_DRIFT_EVERY")); err == nil && every > 0 {
		period = every
	}
	s := testenv.Start(b, testenv.Parts{Worker: true, Watcher: true, FileTemporal: true, Bare: true})
	ctx := context.Background()
	plan := s.Plan("drift-light", fmt.Sprintf("  drift: {every: %s, action: repair}\n", period), testenv.Templates("drift-light"))

	b.ResetTimer()
	created := time.Now()
	testenv.Parallel(b, n, func(i int) error {
		_, err := s.CreateInstance(fmt.Sprintf("d-%05d", i), plan, "")
		return err
	})
	succeeded := 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list osbv1alpha1.SFServiceInstanceList
		if err := s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)); err != nil {
			return false, err
		}
		succeeded = 0
		for _, inst := range list.Items {
			if inst.Status.State == osbv1alpha1.StateSucceeded {
				succeeded++
			}
		}
		return succeeded == n, nil
	})
	require.NoError(b, err, "%d of %d instances are provisioned", succeeded, n)
	provisioned := time.Since(created)

	// Steady state begins once the provisions' last writes have stopped (no
	// write between two looks 5 s apart), and the window ends once every
	// instance has been checked once: each check reads its ConfigMap from
	// the API server, and nothing else reads ConfigMaps at rest, so the
	// window is as long as the checks took: about a period, ending just
	// after the pass (a burst at each tick) that checked the last of them,
	// which if anything overstates the rate.
	var last float64 = -1
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 10*time.Minute, false, func(context.Context) (bool, error) {
		w, _ := atRest(apiRequests(b, s.Kube), nil)
		settled := w == last
		last = w
		return settled, nil
	})
	require.NoError(b, err, "the provisions' writes stop")
	cpuBefore, reqBefore := testenv.CPU(), apiRequests(b, s.Kube)
	began := time.Now()
	stopProfile := testenv.ProfileSelf(b, "drift-qm")
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*period+time.Minute, false, func(context.Context) (bool, error) {
		return apiRequests(b, s.Kube)["GET configmaps/"]-reqBefore["GET configmaps/"] >= float64(n), nil
	})
	stopProfile()
	require.NoError(b, err, "every instance is checked once")
	window := time.Since(began)
	cpuAfter, reqAfter := testenv.CPU(), apiRequests(b, s.Kube)
	b.StopTimer()

	used := func(names ...string) float64 {
		var c float64
		for _, name := range names {
			c += (cpuAfter[name] - cpuBefore[name]).Seconds() / window.Seconds()
		}
		return c
	}
	writes, written := atRest(reqAfter, reqBefore)
	var reads float64
	for key, v := range reqAfter {
		if strings.HasPrefix(key, "GET ") {
			reads += v - reqBefore[key]
		}
	}
	goal, withAPI := used("qm", "temporal"), used("qm", "temporal", "kube-apiserver", "etcd")
	// The cost follows the rate of checks: per instance checked every ten
	// minutes, as many instances as this rate checks that often.
	atTenMinutes := float64(n) * (10 * time.Minute).Seconds() / period.Seconds()
	perInstance := goal / atTenMinutes * 1e6
	b.ReportMetric(goal, "cores")
	b.ReportMetric(perInstance, "µcores/instance")
	b.ReportMetric(writes, "api-writes")
	b.ReportMetric(reads/float64(n), "gets/instance")
	fmt.Printf("\ndrift checks of %d instances (a ConfigMap and a Service each), every %v, API server alone, file-backed Temporal:\n"+
		"  provisioned in %v\n"+
		"  steady state until every instance was checked once (%v, a period is %v), nothing drifted: %.1f GETs per instance, %.0f writes%s\n"+
		"  CPU in cores: qm %.3f, temporal %.3f, kube-apiserver %.3f, etcd %.3f\n"+
		"  Quartermaster + Temporal: %.4f cores; per instance checked every ten minutes (%.0f at this rate): %.1f µcores (health checks' budget: %.1f µcores per service); with the API server: %.4f\n%s\n%s",
		n, period, provisioned.Round(time.Second), window.Round(time.Second), period, reads/float64(n), writes, strings.Join(append([]string{""}, written...), "\n    "),
		used("qm"), used("temporal"), used("kube-apiserver"), used("etcd"),
		goal, atTenMinutes, perInstance, healthCheckBudget*1e6, withAPI,
		testenv.BenchVerdict("Quartermaster + Temporal per instance checked every ten minutes", perInstance, healthCheckBudget*1e6, "µcores", true),
		testenv.BenchVerdict("API writes at rest", writes, 0, "writes", true))
}

// atRest counts the API server's writes between two readings of
// apiRequests (before nil: since it started), and names each: the
// watcher's lease renewals aside, which are no check's.
func atRest(after, before map[string]float64) (float64, []string) {
	var writes float64
	var written []string
	for key, v := range after {
		d := v - before[key]
		verb, _, _ := strings.Cut(key, " ")
		if d <= 0 || strings.HasPrefix(key, "PUT leases/") || !slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, verb) {
			continue
		}
		writes += d
		written = append(written, fmt.Sprintf("%s: %.0f", key, d))
	}
	slices.Sort(written)
	return writes, written
}
