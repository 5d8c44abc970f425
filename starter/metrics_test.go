package starter_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/deploy/chart"
	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/internal/scheduling"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestOperationMetrics drives operations that succeed, fail on a template
// error and time out, a binding, a health-checked service, an instance
// waiting for a cluster, a claim, a usage, a ServiceBinding and a mass
// update, and scrapes the worker's, the watcher's and the API's /metrics as
// Prometheus would: the operations' counters and histograms by plan and
// outcome, the checks', the state gauges and the mass update's progress.
// The gauges equal the resources' counts again after the watcher, which
// serves them, restarts; and every metric the chart's dashboard and alerts
// query is one of those served.
func TestOperationMetrics(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, API: true, Metrics: true, HealthCheckMinute: checkMinute,
		Scheduler: scheduling.LabelSelector, ClusterProbePeriod: 300 * time.Millisecond})
	// The one cluster instances are scheduled on is the test's own.
	register(t, s, "home", s.Kube.Kubeconfig, nil)
	waitCluster(t, s, "home", "ready", func(c *resourcev1alpha1.SFCluster) bool { return c.Status.State == resourcev1alpha1.ClusterReady })
	instant := s.Plan("instant", "", testenv.Templates("instant"))
	broken := s.Plan("broken", "", testenv.Templates("broken"))
	slow := s.Plan("slow", "  maximum_polling_duration: 3", testenv.Templates("gated-password"))
	// No cluster has the label this plan's instances need: they wait.
	nowhere := s.Plan("nowhere", "", "  - action: clusterSelector\n    type: gotemplate\n    content: plan=nowhere\n"+testenv.Templates("instant"))
	checksBefore := testenv.Scrape(t, s.WorkerMetrics).Count("qm_health_checks_total", "kind", "tcp", "result", "Succeeded")

	// A fleet of three instances whose updates wait for their gates, for a
	// mass update that runs while the test scrapes.
	massPlan := massFleet(t, s, 3, "", func(int) string { return `{"gated": true}` })
	s.Instance("m-1", instant, "")
	s.Instance("m-2", instant, "")
	s.Instance("m-broken", broken, "")
	s.Instance("m-slow", slow, "")
	s.Instance("m-wait", nowhere, "")
	failed := func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed }
	// Scheduled first: the cluster's name in the spec is generation 2.
	s.WaitInstance("m-1", "provisioned", testenv.Succeeded(2))
	s.WaitInstance("m-2", "provisioned", testenv.Succeeded(2))
	s.WaitInstance("m-broken", "failed", failed)
	s.WaitInstance("m-slow", "timed out", failed)
	s.Bind("mb-1", "m-1", instant)
	l := listen(t)
	registered(t, s, "checked", fmt.Sprintf(`    tcp: {host: 127.0.0.1, port: %s, minutes: 1, timeoutSeconds: 1}`, l.port()))
	// A claim no service matches, a usage of a workload that does not
	// exist, a ServiceBinding of a Secret that does not: each is counted
	// in its state.
	for _, manifest := range strings.Split(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: unmatched, namespace: %[1]s}
spec:
  serviceClassIdentity: [{name: type, value: nothing-like-it}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev
---
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: web-uses-mb-1, namespace: %[1]s}
spec:
  serviceBindingRef: {name: mb-1}
  usedBy: {kind: deployment, name: web}
---
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: web-db, namespace: %[1]s}
spec:
  service: {apiVersion: v1, kind: Secret, name: no-such-secret}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}`, s.Namespace), "---") {
		s.Create(manifest)
	}
	newVersion(t, s, "2")
	mass := s.Namespace + "/metrics"
	admin(t, s, http.MethodPost, "/admin/mass-updates", fmt.Sprintf(`{"name": %q, "plans": [%q], "concurrency": 1}`, mass, massPlan), http.StatusAccepted, nil)

	// The worker counts each operation once, when its run ends: the status
	// is written just before, so the counters may lag it by a moment.
	op := func(operation, plan string, more ...string) []string {
		return append([]string{"operation", operation, "service", s.ServiceID, "plan", plan}, more...)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		w := testenv.Scrape(c, s.WorkerMetrics)
		assert.Equal(c, 2, w.Count("qm_operations_started_total", op("provision", instant)...))
		assert.Equal(c, 2, w.Count("qm_operations_ended_total", op("provision", instant, "outcome", "succeeded", "kind", "")...))
		assert.Equal(c, 2, w.Count("qm_operation_duration_seconds", op("provision", instant, "outcome", "succeeded")...), "the histogram's count")
		assert.Equal(c, 1, w.Count("qm_operations_started_total", op("bind", instant)...))
		assert.Equal(c, 1, w.Count("qm_operations_ended_total", op("bind", instant, "outcome", "succeeded")...))

		assert.Equal(c, 1, w.Count("qm_operations_started_total", op("provision", broken)...))
		assert.Equal(c, 1, w.Count("qm_operations_ended_total", op("provision", broken, "outcome", "failed", "kind", "TemplateError")...))
		assert.Equal(c, 1, w.Count("qm_operation_duration_seconds", op("provision", broken, "outcome", "failed")...))

		assert.Equal(c, 1, w.Count("qm_operations_ended_total", op("provision", slow, "outcome", "timeout", "kind", "Timeout")...))
		assert.Equal(c, 1, w.Count("qm_operation_duration_seconds", op("provision", slow, "outcome", "timeout")...))
		assert.GreaterOrEqual(c, w.Sum("qm_operation_duration_seconds", op("provision", slow)...), 3.0,
			"a timed-out provision took at least its maximum_polling_duration")
		assert.Equal(c, 0, w.Count("qm_operations_ended_total", op("provision", slow, "outcome", "succeeded")...))

		assert.Greater(c, w.Count("qm_health_checks_total", "kind", "tcp", "result", "Succeeded"), checksBefore)
		assert.Positive(c, w.Count("qm_health_check_duration_seconds", "kind", "tcp"), "the checks' histogram's count")
		assert.Positive(c, w.Count("temporal_num_pollers", "poller_type", "workflow_task"), "the worker polls its task queue")
	}, 30*time.Second, 200*time.Millisecond, "the worker's operation and check metrics")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := testenv.Scrape(c, s.APIMetrics)
		assert.Equal(c, 3, a.Count("qm_mass_update_instances", "mass_update", mass, "state", "selected"))
		assert.Equal(c, 1, a.Count("qm_mass_update_instances", "mass_update", mass, "state", "in_flight"))
		assert.Equal(c, 2, a.Count("qm_mass_update_instances", "mass_update", mass, "state", "remaining"))
		assert.Equal(c, 0, a.Count("qm_mass_update_paused", "mass_update", mass))
		assert.Contains(c, a, "qm_mass_update_paused")
	}, 30*time.Second, 200*time.Millisecond, "the API's mass-update gauges")

	gauges := func(c *assert.CollectT) {
		g := testenv.Scrape(c, s.WatcherMetrics)
		assert.Equal(c, 2, g.Count("qm_instances", "plan", instant, "state", "succeeded"))
		assert.Equal(c, 1, g.Count("qm_instances", "plan", broken, "state", "failed"))
		assert.Equal(c, 1, g.Count("qm_instances", "plan", slow, "state", "failed"))
		assert.Equal(c, 1, g.Count("qm_bindings", "plan", instant, "state", "succeeded"))
		assert.Equal(c, 3, g.Count("qm_plan_maximum_polling_seconds", "plan", slow))
		assert.Equal(c, 1, g.Count("qm_registered_services", "namespace", s.Namespace, "state", "Available"))
		assert.Equal(c, 1, g.Count("qm_instances_waiting_for_cluster", "plan", nowhere))
		assert.Equal(c, 2, g.Count("qm_cluster_reservations", "namespace", s.Namespace, "cluster", "home"),
			"the failed and the timed-out instance hold their places")
		assert.Equal(c, 1, g.Count("qm_service_claims", "namespace", s.Namespace, "state", "Pending"))
		assert.Equal(c, 1, g.Count("qm_binding_usages", "namespace", s.Namespace))
		assert.Equal(c, 1, g.Count("qm_service_bindings", "namespace", s.Namespace, "ready", "False"))
		assert.Equal(c, 1, g.Count("qm_cluster_ready", "namespace", s.Namespace, "cluster", "home"))
		assert.Equal(c, 1, g.Count("qm_cluster_limit_ratio", "namespace", s.Namespace, "cluster", "home"))
		assert.True(c, g.Has("qm_cluster_use_ratio", "namespace", s.Namespace, "cluster", "home", "resource", "cpu"), "the cluster's CPU use")
		assertGaugesCount(c, s, g)
	}
	require.EventuallyWithT(t, gauges, 30*time.Second, 200*time.Millisecond, "the watcher's state gauges")

	s.RestartWatcher()
	require.EventuallyWithT(t, gauges, 30*time.Second, 200*time.Millisecond, "the state gauges after the watcher restarted")

	// Every metric the dashboard and the alerts query is one a component
	// serves: scraped, or registered on the registry the worker and the
	// watcher serve (a family this test made no series of, a rotation's,
	// is registered all the same).
	seen := described(metrics.Collectors()...)
	for _, url := range []string{s.WorkerMetrics, s.WatcherMetrics, s.APIMetrics} {
		for name := range testenv.Scrape(t, url) {
			seen[name] = true
		}
	}
	for _, name := range queriedMetrics(t) {
		assert.True(t, seen[name], "the dashboard or the alerts query %s, which no component served", name)
	}
	admin(t, s, http.MethodPost, "/admin/mass-updates/"+mass+"/cancel", "", http.StatusAccepted, nil)
}

// queriedMetrics lists the metric families the chart's dashboard and alert
// rules name in their queries (a histogram's _bucket series by its family).
func queriedMetrics(t *testing.T) []string {
	dashboard, err := chart.DashboardJSON()
	require.NoError(t, err)
	rules, err := os.ReadFile("../deploy/chart/quartermaster/files/alerts/quartermaster.rules.yaml")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, m := range metricName.FindAllString(string(dashboard)+string(rules), -1) {
		names[strings.TrimSuffix(m, "_bucket")] = true
	}
	require.Contains(t, names, "qm_operations_ended_total", "the queries were read")
	return slices.Sorted(maps.Keys(names))
}

// metricName matches the names of Quartermaster's and the Temporal SDK's
// metrics in a query.
var metricName = regexp.MustCompile(`\b(qm|temporal)_[a-z_]+[a-z]`)

// assertGaugesCount checks qm_instances against the instances the API
// server lists in the System's namespace, plan by plan and state by state.
func assertGaugesCount(c *assert.CollectT, s *testenv.System, g testenv.Metrics) {
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(c, s.Kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.Namespace)))
	counts := map[[2]string]int{}
	for _, inst := range list.Items {
		counts[[2]string{inst.Spec.PlanID, string(inst.Status.State)}]++
	}
	require.NotEmpty(c, counts)
	for k, n := range counts {
		assert.Equal(c, n, g.Count("qm_instances", "service", s.ServiceID, "plan", k[0], "state", k[1]), "plan %s, state %s", k[0], k[1])
	}
}

// described lists the metric families collectors describe, by name.
func described(collectors ...prometheus.Collector) map[string]bool {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		// A Desc says its name only in its String: Desc{fqName: "qm_...", ...}.
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)
