package e2e

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestChartUpgradeUnderLoad is TestUpgradeUnderLoad as an operator runs it:
// the earlier release (defaultUpgradeFrom, or QM_UPGRADE_FROM) installed by
// the chart of its commit, its pods run from its image, on the Temporal
// the test binary uses (make test-upgrade gives it the Temporal cluster).
// With every kind of long-lived run alive, this release's chart is applied
// and each Deployment's pods are replaced as a rolling update does (a new
// pod ready, then the old one deleted, given its grace period), workers,
// watchers and APIs in turn, while 200 provisions and 50 binds arrive
// through the API's Service and a mass update runs. Then the earlier
// release's chart and image come back (a rollback), under the same load,
// routed back to its unversioned workers as docs/upgrades.md says. After
// each step: nothing lost, stuck or done twice, no provision waited more
// than rollingSlack longer than without the replacements (or than the
// step's median, when the mass update beside it queued them all: checkStall), Temporal routes
// to the step's build, every long-lived run runs and the checks go on; and
// no history or pod log holds a failed workflow task.
func TestChartUpgradeUnderLoad(t *testing.T) {
	upgradeFrom := cmp.Or(os.Getenv("QM_UPGRADE_FROM"), defaultUpgradeFrom)
	this := unpackImage(t, imageArchive(t))
	earlierBin := testenv.BuildRelease(t, upgradeFrom)
	earlier := imageWith(t, this, earlierBin)
	earlierChart, err := loader.Load(filepath.Join(testenv.ReleaseSource(earlierBin), "deploy", "chart", "quartermaster"))
	require.NoError(t, err, "the chart of %s", upgradeFrom)
	kube := testenv.Kubernetes(t)

	// The default scheduler: an instance keeps its first generation, as the
	// rollout's provisions are timed to.
	r := newPodsRelease(t, kube, map[string]any{"scheduler": "default", "extraArgs": []any{"--healthcheck-minute=" + upgradeCheckMinute.String()}})
	earlierObjs := testenv.RenderChart(t, earlierChart, r.ns, r.values)
	thisObjs := testenv.RenderChart(t, testenv.QMChart(t), r.ns, r.values)
	applyRelease(t, kube, earlierObjs, false)
	k := newKubelet(t, kube, earlier)
	for _, kind := range []string{"worker", "watcher", "api"} {
		k.run(deploymentOf(t, earlierObjs, r.fullname+"-"+kind))
	}
	k.waitReady(2 * time.Minute)
	s := testenv.Over(t, kube, r.ns, testenv.KeyValueService)
	s.Temporal = testenv.Temporal(t)
	var svc corev1.Service
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(earlierObjs["Service/"+r.fullname+"-api"].Object, &svc))
	s.URL = k.service(&svc)
	t.Logf("running %s's chart and image, then this release's (%s)", upgradeFrom, r.fullname)

	l := startLongLived(t, s, "db")
	require.EventuallyWithT(t, l.settled, 2*time.Minute, 200*time.Millisecond, "every long-lived run runs on %s", upgradeFrom)
	ro := newServiceRollout(t, s, s.URL)
	baseline := ro.baseline("base", baselineProvisions)

	// Rolling back to a release before Worker Versioning, the operator
	// routes to its unversioned workers once one polls.
	routeUnversioned := func() {
		qm := filepath.Join(this.root, this.config.Entrypoint[0])
		out, err := exec.Command(qm, "builds", "current", "--unversioned", "--wait", "1m", "--deployment-name", r.fullname,
			"--temporal-address", testenv.TemporalAddress(t)).CombinedOutput()
		require.NoError(t, err, "qm builds current --unversioned: %s", out)
	}
	stalls := map[string]time.Duration{}
	for _, step := range []struct {
		name, release string
		objs          map[string]*unstructured.Unstructured
		img           image
		routed        func()
		build         string // the build the loops run on after the step ("": unversioned)
	}{
		{"up", "this release", thisObjs, this, nil, "0.1.0"},
		{"down", upgradeFrom, earlierObjs, earlier, routeUnversioned, ""},
	} {
		applyRelease(t, kube, step.objs, false)
		k.img = step.img
		stalls[step.name] = upgradeStep(t, s, ro, l, baseline, upgradeStepOf{name: step.name, massUpdate: "chart-" + step.name,
			release: step.release, deployment: r.fullname, build: step.build},
			func() []time.Duration { return rollPods(ro, k, step.objs, r.fullname, step.name, step.routed) })
	}

	failed, crossed := taskFailures(t, s, s.Namespace)
	assert.Empty(t, failed, "workflow tasks failed")
	waiting := waitingTypes(t, testenv.ReleaseSource(earlierBin))
	var logged []string
	for _, p := range append(k.pods, k.gone...) {
		logged = append(logged, failedTaskLines(p.name, p.log.String(), waiting)...)
	}
	assert.Empty(t, logged, "pods logged failed workflow tasks")
	checkWaiting(t, s, waiting)
	t.Logf("longest stall: upgrade %s, rollback %s; runs that crossed both: %s", stalls["up"].Round(time.Millisecond),
		stalls["down"].Round(time.Millisecond), crossed)
}

// rollPods replaces the pods of the release's Deployments by those of
// objs, one at a time, workers, watchers and APIs in turn, paced over the
// rollingProvisions provisions named prefix-i that arrive meanwhile, and
// returns their times; routed, when set, is called once the first new
// worker is ready.
func rollPods(ro *rollout, k *kubelet, objs map[string]*unstructured.Unstructured, fullname, prefix string, routed func()) []time.Duration {
	t := ro.t
	t.Helper()
	provisioned := make(chan error, 1)
	start := time.Now()
	go func() { provisioned <- ro.provisionAll(prefix, rollingProvisions) }()
	pace := time.NewTicker(rollingEvery)
	defer pace.Stop()
	for _, kind := range []string{"worker", "watcher", "api"} {
		d := deploymentOf(t, objs, fullname+"-"+kind)
		for i, old := range k.podsOf(d.Name) {
			<-pace.C
			k.replace(old, d, fmt.Sprintf("%s-%s-%d", d.Name, prefix, i))
			if kind == "worker" && i == 0 && routed != nil {
				routed()
			}
		}
	}
	t.Logf("%s: the replacements took %s; the provisions arrive over %ds", prefix, time.Since(start).Round(time.Second), rollingProvisions/rollingRate)
	require.NoError(t, <-provisioned)
	return ro.waitAll(prefix, rollingProvisions)
}

// deploymentOf is the Deployment named name among a release's objects.
func deploymentOf(t *testing.T, objs map[string]*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	obj, ok := objs["Deployment/"+name]
	require.True(t, ok, "the release has the Deployment %s", name)
	var d appsv1.Deployment
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
	return &d
}

// imageWith is img with its entrypoint replaced by the binary bin: an
// earlier release's image, built as `make image` builds it, of that
// release's qm.
func imageWith(t *testing.T, img image, bin string) image {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, openDirs(root))
	require.NoError(t, os.CopyFS(root, os.DirFS(img.root)))
	entry := filepath.Join(root, img.config.Entrypoint[0])
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.Remove(entry))
	require.NoError(t, os.WriteFile(entry, data, 0o755))
	return image{root: root, config: img.config}
}
