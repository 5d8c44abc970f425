package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows/runs"
)

// defaultUpgradeFrom is the release the upgrade starts from and rolls back
// to, unless QM_UPGRADE_FROM names another commit (make test-upgrade
// UPGRADE_FROM=…): the landed head before Quartermaster tested its
// upgrades.
const defaultUpgradeFrom = "fc4a9f8"

// The upgrade's long-lived load: upgradeServices registered services, each
// checked every upgradeCheckMinute (a check minute of that length, and
// "minutes: 1"); in each replacement, upgradeBinds OSB binds beside the
// provisions, and a mass update of the instances there are to a new
// generation of their plan, at most upgradeMassConcurrency updates in
// flight, so that it runs through the replacements. (Not paced by a rate:
// a rate's next start waits for a timer, and the run's background-priority
// workflow tasks come late under the replacements' load, which held a rate
// of 10 a second to under 2 here.)
const (
	upgradeServices        = 50
	upgradeCheckMinute     = 10 * time.Second
	upgradeBinds           = 50
	upgradeMassConcurrency = 4
)

// TestUpgradeUnderLoad runs an earlier release (defaultUpgradeFrom) as processes (two of
// each component) with every kind of long-lived run alive: 50 registered
// services checked every 10 s, a claim Resolved and one Pending, a binding
// usage and a ServiceBinding injecting into a Deployment. Then each process
// is replaced by one of this release, one at a time, while 200
// provisions and 50 binds arrive and a mass update of the instances there
// are runs: the earlier release's workers are unversioned, this release's
// a build of a worker deployment that the first of them makes current.
// Then each is replaced by another build of this release, as the next
// release's would be (its operations in flight drain on the build before),
// and then by the earlier release again (a rollback, routed back to the
// unversioned workers as docs/upgrades.md says), under the same load. After each: nothing is lost, stuck or
// done twice (each provision and bind one run, each instance of the mass
// update at the plan's new generation, none failed), no provision waited more than rollingSlack
// longer than without the replacements (or than the step's median, when
// the mass update beside it queued them all: checkStall), no history of the test's runs
// holds a failed workflow task (a non-determinism error is one), no process
// logged one, every long-lived run still runs, and the health checks go on.
func TestUpgradeUnderLoad(t *testing.T) {
	upgradeFrom := cmp.Or(os.Getenv("QM_UPGRADE_FROM"), defaultUpgradeFrom)
	e := newProcessEnv(t)
	earlier := testenv.BuildRelease(t, upgradeFrom)
	s, ctx := e.s, context.Background()
	r := newRollout(t, e, earlier, map[string][]string{"worker": {"--healthcheck-minute", upgradeCheckMinute.String()}})
	t.Logf("running %s (%s) and this release (%s)", upgradeFrom, earlier, e.qm)
	// This release's workers are a build of a worker deployment, of the
	// release revision after the earlier one's, as the chart runs them; the
	// earlier release's are unversioned (and pass over these variables).
	deployment := "upgrade-" + s.Namespace
	r.f.env = append(r.f.env, "QM_WORKER_DEPLOYMENT="+deployment)
	build := func(id string, revision int) func() {
		return func() {
			r.f.mu.Lock()
			defer r.f.mu.Unlock()
			r.f.env = append(r.f.env, "QM_BUILD_ID="+id, fmt.Sprintf("QM_RELEASE_REVISION=%d", revision))
		}
	}
	// Rolling back to a release before Worker Versioning, the operator
	// routes to its unversioned workers once one polls (docs/upgrades.md).
	routeUnversioned := func() {
		out, err := exec.Command(e.qm, slices.Concat([]string{"builds", "current", "--unversioned", "--wait", "1m", "--deployment-name", deployment}, e.common)...).CombinedOutput()
		require.NoError(t, err, "qm builds current --unversioned: %s", out)
	}

	// The long-lived runs.
	l := startLongLived(t, s, "db")
	require.EventuallyWithT(t, l.settled, 2*time.Minute, 200*time.Millisecond, "every long-lived run runs on %s", upgradeFrom)

	claimDeviations := watchHeldClaim(t, s, "resolved", "svc-00")
	baseline := r.baseline("base", baselineProvisions)
	stalls := map[string]time.Duration{}
	// Up from the earlier release's unversioned workers, then to another
	// build of this release (as the next release would be), then back.
	for _, step := range []struct {
		name, qm, release string
		// before sets the new workers' build; routed routes to it, when a
		// worker does not.
		before, routed func()
		build          string // the build the loops run on after the step ("": unversioned)
	}{
		{"up", e.qm, "this release", build(upgradeBuild, 2), nil, upgradeBuild},
		{"next", e.qm, "this release's next build", build(upgradeBuild+"-next", 3), nil, upgradeBuild + "-next"},
		{"down", earlier, upgradeFrom, func() {}, routeUnversioned, ""},
	} {
		step.before()
		stalls[step.name] = upgradeStep(t, s, r, l, baseline, upgradeStepOf{name: step.name, massUpdate: "upgrade-" + step.name,
			release: step.release, deployment: deployment, build: step.build},
			func() []time.Duration { return r.roll(step.name, step.qm, step.routed) })
	}

	// No failed workflow task in any run of the test, and no process
	// logged a non-determinism error.
	failed, crossed := taskFailures(t, s, s.Namespace)
	assert.Empty(t, failed, "workflow tasks failed")
	waiting := waitingTypes(t, testenv.ReleaseSource(earlier))
	var logged []string
	for _, p := range r.f.all {
		logged = append(logged, failedTaskLines(p.name, p.log.String(), waiting)...)
	}
	assert.Empty(t, logged, "processes logged failed workflow tasks")
	checkWaiting(t, s, waiting)
	var claim primazav1alpha1.ServiceClaim
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "resolved"}, &claim))
	assert.Equal(t, "svc-00", claim.Status.RegisteredService, "the claim kept its service")
	assert.True(t, meta.IsStatusConditionTrue(claim.Status.Conditions, "ServiceAvailable"))
	assert.Empty(t, claimDeviations(), "every write of the claim through the upgrade and the rollback kept its service, available")
	t.Logf("longest stall: upgrade %s, upgrade between builds %s, rollback %s; runs that crossed all three: %s", stalls["up"].Round(time.Millisecond),
		stalls["next"].Round(time.Millisecond), stalls["down"].Round(time.Millisecond), crossed)
}

// upgradeStepOf names one step of an upgrade: its name (the provisions'
// and binds' prefix), its mass update's, the release it ends on, and the
// worker deployment and build Temporal routes to then ("": unversioned).
type upgradeStepOf struct {
	name, massUpdate, release string
	deployment, build         string
}

// upgradeStep carries out one step of an upgrade under load: while roll
// replaces the components and returns the times of the provisions that
// arrive meanwhile, a mass update of the rollout's plan runs and
// upgradeBinds binds of the instance db arrive. Then it checks what every
// step must leave (the routing, nothing lost, stuck or done twice, every
// long-lived run running and checking, a service registered now checked)
// and returns the longest stall.
func upgradeStep(t *testing.T, s *testenv.System, r *rollout, l *longLived, baseline []time.Duration, step upgradeStepOf, roll func() []time.Duration) time.Duration {
	t.Helper()
	before, began := l.checks.Load(), time.Now()
	gen := startMassUpdate(t, s, r.planID, step.massUpdate)
	binds := make(chan error, 1)
	go func() { binds <- bindAll(r.f, s.ServiceID, l.plan, "db", step.name, upgradeBinds) }()
	stall := r.checkStall(step.name, baseline, roll(), true)
	checkBuilds(t, s, step.deployment, step.build)
	r.checkOnce(step.name)
	require.NoError(t, <-binds)
	checkBinds(t, s, step.name, upgradeBinds)
	checkMassUpdate(t, s, r.planID, step.massUpdate, gen)
	require.EventuallyWithT(t, l.settled, time.Minute, 200*time.Millisecond, "every long-lived run runs on %s", step.release)
	// Each service is checked every upgradeCheckMinute: over the step, at
	// most two checks each may be lost to the replacements (the first and
	// last intervals are cut by the step's ends).
	intervals := int64(time.Since(began) / upgradeCheckMinute)
	assert.GreaterOrEqual(t, l.checks.Load()-before, upgradeServices*(intervals-2),
		"the checks went on through the replacements: %d services, %d intervals of %s", upgradeServices, intervals, upgradeCheckMinute)
	checkLateService(t, s, "late-"+step.name, step.release)
	return stall
}

// watchHeldClaim watches the claim name from now until the function it
// returns is called, which returns every write of it that did not show it
// Resolved, holding service, with ServiceAvailable true: the claim's state
// through the whole upgrade, where one look at the end would miss a claim
// that lost its service and got it back.
func watchHeldClaim(t *testing.T, s *testenv.System, name, service string) func() []string {
	t.Helper()
	var deviations []string
	stop := s.Kube.Watch(t, &primazav1alpha1.ServiceClaimList{}, func(ev watch.Event) {
		c, ok := ev.Object.(*primazav1alpha1.ServiceClaim)
		if !ok {
			return
		}
		if ev.Type == watch.Deleted || c.Status.State != primazav1alpha1.ClaimResolved || c.Status.RegisteredService != service ||
			!meta.IsStatusConditionTrue(c.Status.Conditions, "ServiceAvailable") {
			deviations = append(deviations, fmt.Sprintf("%s %s: %s, holding %q, conditions %v",
				time.Now().Format(timelineFormat), ev.Type, c.Status.State, c.Status.RegisteredService, c.Status.Conditions))
		}
	}, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingFields{"metadata.name": name})
	return func() []string {
		stop()
		return deviations
	}
}

// failedTaskLines are the lines of a component's log that say a workflow
// task failed (a non-determinism error is one), each named after it,
// except those of a long-lived run whose type the component's release
// does not know (waiting: see waitingTypes).
func failedTaskLines(name, log string, waiting map[string]bool) []string {
	var out []string
	for line := range strings.Lines(log) {
		if (strings.Contains(line, "TMPRL1100") || strings.Contains(line, "Failed to process workflow task")) && !waitingFor(line, waiting) {
			out = append(out, name+": "+line[:min(len(line), 300)])
		}
	}
	return out
}

// upgradeBuild is the build ID of this release's workers in the upgrade.
const upgradeBuild = "this"

// checkBuilds checks, after a step of the upgrade, that Temporal routes to
// build ("": the unversioned workers), that no run is left pinned to
// another build, and that the health-check shards, which run every few
// seconds, moved to build.
func checkBuilds(t *testing.T, s *testenv.System, deployment, build string) {
	t.Helper()
	ctx := context.Background()
	builds, unversioned, err := worker.Builds(ctx, s.Temporal, deployment, nil)
	require.NoError(t, err)
	routed := map[string]string{"": unversioned}
	for _, b := range builds {
		routed[b.ID] = b.Routing
		if b.ID != build {
			assert.Zero(t, b.Pinned, "no run is left pinned to build %s", b.ID)
		}
	}
	assert.Equal(t, "current", routed[build], "Temporal routes to build %q: %v", build, routed)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for shard := range healthcheck.Shards {
			resp, err := s.Temporal.DescribeWorkflowExecution(ctx, runs.HealthChecksID(shard), "")
			if assert.NoError(c, err) {
				v := resp.GetWorkflowExecutionInfo().GetVersioningInfo()
				assert.Equal(c, build, v.GetDeploymentVersion().GetBuildId(), "shard %d's build", shard)
			}
		}
	}, 3*upgradeCheckMinute, 200*time.Millisecond, "the health-check shards run on build %q", build)
}

// bindAll binds n bindings named prefix-bind-i of the instance inst
// (plan planID) at rollingRate a second, each through an API in turn,
// retrying as a platform does (on the other API) while one is going away.
func bindAll(f *fleet, serviceID, planID, inst, prefix string, n int) error {
	body := fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, serviceID, planID)
	return paced(n, func(i int) error {
		path := fmt.Sprintf("/v2/service_instances/%s/service_bindings/%s-bind-%03d", inst, prefix, i)
		return putRetrying(f, path, body, i, http.StatusCreated, http.StatusOK)
	})
}

// checkBinds checks that each of the n binds named prefix-bind-i
// succeeded, in one run that did its work.
func checkBinds(t *testing.T, s *testenv.System, prefix string, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s-bind-%03d", prefix, i)
		var b osbv1alpha1.SFServiceBinding
		require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &b))
		assert.Equal(t, osbv1alpha1.StateSucceeded, b.Status.State, name)
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: s.Namespace, Name: name})
		working, _ := s.WorkingRuns(t, id)
		assert.Equal(t, 1, working, "%s did its work in one run", id)
	}
}

// taskFailures reads the histories of every run of the namespace's
// resources and of the health-check shards, and returns the workflow
// tasks that failed ("ID: cause") and how many long-lived runs there are
// per workflow type.
func taskFailures(t *testing.T, s *testenv.System, ns string) ([]string, string) {
	t.Helper()
	ctx := context.Background()
	var failed []string
	types := map[string]int{}
	var token []byte
	for {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1000, NextPageToken: token})
		require.NoError(t, err)
		for _, ex := range resp.GetExecutions() {
			id := ex.GetExecution().GetWorkflowId()
			if !strings.Contains(id, "/"+ns+"/") && !strings.HasSuffix(id, "/"+ns) && !strings.HasPrefix(id, "registeredservices/") {
				continue
			}
			if ex.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
				types[ex.GetType().GetName()]++
			}
			for _, ev := range s.History(id, ex.GetExecution().GetRunId()).GetEvents() {
				if attrs := ev.GetWorkflowTaskFailedEventAttributes(); attrs != nil {
					msg := attrs.GetFailure().GetMessage()
					failed = append(failed, fmt.Sprintf("%s: %s: %s", id, attrs.GetCause(), msg[:min(len(msg), 300)]))
				}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	var kinds []string
	for typ, n := range types {
		kinds = append(kinds, fmt.Sprintf("%s %d", typ, n))
	}
	sort.Strings(kinds)
	return failed, strings.Join(kinds, ", ")
}

// closedPort is a loopback port where nothing listens.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}
