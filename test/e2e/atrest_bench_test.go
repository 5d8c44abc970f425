package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// restSize is what BenchmarkAtRest keeps: instances with a binding each,
// registered services with a health check, claims of some of them, and
// how long it then watches nothing happen.
type restSize struct {
	instances, services, claims int
	idle                        time.Duration
}

// restComponents are the processes of a release, one of each.
var restComponents = []string{"worker", "watcher", "api"}

// restShards is how many watcher shards run beside the release's one
// watcher: QM_BENCH_REST_SHARDS, or 3 (0: none).
func restShards() int {
	if v, err := strconv.Atoi(os.Getenv("QM_BENCH_REST_SHARDS")); err == nil && v >= 0 {
		return v
	}
	return 3
}

// BenchmarkAtRest measures what Quartermaster costs when nothing happens,
// with its components as the chart runs them: one worker, one watcher and
// one API, each a process of qm under a service account of its own, on the
// embedded default (the full cluster, file-backed Temporal). It keeps
// QM_BENCH_REST_INSTANCES instances (default 10,000) with a binding each,
// QM_BENCH_REST_SERVICES registered services (default 1,000) with a tcp
// health check every 5 minutes, and QM_BENCH_REST_CLAIMS claims (default
// 500) of them. The OSB objects are in the broker's namespace, the
// registry and the claims in an application's, as on a platform (a
// sharded first shard watches the bindings' credentials only in the
// namespaces where something reads Secrets). Once they have settled (no write from Quartermaster for
// 15 s) it watches 10 minutes of rest. It prints each process's resident
// memory and CPU, the API requests per minute of each component by verb
// and resource (from the API server's audit log), and the memory each
// process spends per object its caches hold. Beside the one watcher run
// QM_BENCH_REST_SHARDS watcher shards (default 3, `qm watcher --shard
// N/M`), each a process of its own, for their figures side by side with
// the whole watcher's (they start each operation the whole one does too;
// a workflow ID starts one run whoever asks). The smoke run fails if a
// component writes at rest anything but a health check's change or its
// leader-election lease.
func BenchmarkAtRest(b *testing.B) {
	size := restSize{
		instances: testenv.BenchSize("QM_BENCH_REST_INSTANCES", 10000),
		services:  testenv.BenchSize("QM_BENCH_REST_SERVICES", 1000),
		claims:    testenv.BenchSize("QM_BENCH_REST_CLAIMS", 500),
		idle:      10 * time.Minute,
	}
	if testenv.BenchSmoke() {
		size.services, size.claims, size.idle = 10, 5, 15*time.Second
	}
	kube := testenv.Kubernetes(b)
	s := testenv.Start(b, testenv.Parts{})
	ns := s.Namespace
	planID := s.Plan("instant", "", testenv.Templates("instant"))
	rel := startRelease(b, kube, ns, restShards())
	empty := rel.sample(b)
	listeners := testenv.Listeners(b, 100, new(atomic.Int64))

	setupStart := time.Now()
	makeRest(b, kube.Client, s, planID, size, listeners)
	setup := time.Since(setupStart)
	settled := rel.settle(b, 5*time.Minute)

	b.ResetTimer()
	before, peak := rel.sample(b), map[string]int64{}
	// Resident memory is read every 10 s through the window, and at its
	// end, for its highest.
	tick, window := time.NewTicker(10*time.Second), time.NewTimer(size.idle)
	defer tick.Stop()
	for open := true; open; {
		select {
		case <-tick.C:
		case <-window.C:
			open = false
		}
		for _, c := range rel.components {
			peak[c] = max(peak[c], rssOf(rel.procs[c]))
		}
	}
	after := rel.sample(b)
	b.StopTimer()

	requests := rel.audit.since(b, before.auditOffset)
	objects := rel.audit.cached(b, kube)
	report := restReport{components: rel.components, size: size, setup: setup, settled: settled, empty: empty, before: before, after: after, peak: peak,
		requests: requests, objects: objects, events: eventsSince(b, kube.Client, ns, before.at)}
	fmt.Print(report.String())
	for _, w := range requests.unexpectedWrites() {
		b.Errorf("at rest, %s", w)
	}
}

// makeRest creates what BenchmarkAtRest keeps and waits until it is
// ready: the instances succeeded, their bindings too, the services
// checked, the claims resolved.
func makeRest(b *testing.B, c ctrlclient.Client, s *testenv.System, planID string, size restSize, listeners []int) {
	ctx, ns, apps := context.Background(), s.Namespace, s.Namespace+"-apps"
	require.NoError(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apps}}))
	b.Cleanup(func() {
		if err := c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apps}}); err != nil {
			b.Logf("deleting namespace %s: %v", apps, err)
		}
	})
	name := func(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }
	testenv.Parallel(b, size.instances, func(i int) error {
		return c.Create(ctx, &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name("rest", i), Namespace: ns},
			Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: name("rest", i), ServiceID: s.ServiceID, PlanID: planID},
		})
	})
	waitCount(b, c, ns, &osbv1alpha1.SFServiceInstanceList{}, size.instances, "instances succeeded", func(o ctrlclient.Object) bool {
		return o.(*osbv1alpha1.SFServiceInstance).Status.State == osbv1alpha1.StateSucceeded
	})
	testenv.Parallel(b, size.instances, func(i int) error {
		return c.Create(ctx, &osbv1alpha1.SFServiceBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name("bind", i), Namespace: ns},
			Spec:       osbv1alpha1.SFServiceBindingSpec{ID: name("bind", i), InstanceID: name("rest", i), ServiceID: s.ServiceID, PlanID: planID},
		})
	})
	waitCount(b, c, ns, &osbv1alpha1.SFServiceBindingList{}, size.instances, "bindings succeeded", func(o ctrlclient.Object) bool {
		return o.(*osbv1alpha1.SFServiceBinding).Status.State == osbv1alpha1.StateSucceeded
	})
	testenv.Parallel(b, size.services, func(i int) error {
		port := listeners[i%len(listeners)]
		svc := &primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Name: name("db", i), Namespace: apps}}
		svc.Spec = primazav1alpha1.RegisteredServiceSpec{
			ServiceClassIdentity:      []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}},
			ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "host", Value: new("127.0.0.1:" + strconv.Itoa(port))}},
			HealthCheck:               &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{Host: "127.0.0.1", Port: int32(port), Minutes: 5, TimeoutSeconds: 1}},
		}
		return c.Create(ctx, svc)
	})
	waitCount(b, c, apps, &primazav1alpha1.RegisteredServiceList{}, size.services, "services checked and Available", func(o ctrlclient.Object) bool {
		return o.(*primazav1alpha1.RegisteredService).Status.State == primazav1alpha1.ServiceAvailable
	})
	testenv.Parallel(b, size.claims, func(i int) error {
		claim := &primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Name: name("claim", i), Namespace: apps}}
		claim.Spec.ServiceClassIdentity = []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}}
		claim.Spec.ServiceEndpointDefinitionKeys = []string{"host"}
		claim.Spec.EnvironmentTag = "dev"
		return c.Create(ctx, claim)
	})
	waitCount(b, c, apps, &primazav1alpha1.ServiceClaimList{}, size.claims, "claims resolved", func(o ctrlclient.Object) bool {
		return o.(*primazav1alpha1.ServiceClaim).Status.State == primazav1alpha1.ClaimResolved
	})
}

// waitCount lists ns every 5 s until want of list's items satisfy ok.
func waitCount(b *testing.B, c ctrlclient.Client, ns string, list ctrlclient.ObjectList, want int, what string, ok func(ctrlclient.Object) bool) {
	b.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	// Every 5 s: listing ten thousand objects more often would load the
	// machine being set up.
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		require.NoError(b, c.List(context.Background(), list, ctrlclient.InNamespace(ns)))
		objs, err := metaItems(list)
		require.NoError(b, err)
		n := 0
		for _, o := range objs {
			if ok(o) {
				n++
			}
		}
		if n >= want {
			return
		}
		require.True(b, time.Now().Before(deadline), "after 20 minutes %d of %d %s", n, want, what)
		<-tick.C
	}
}

// eventsSince counts the Events of ns recorded since at, by who recorded
// them, on what kind, and why.
func eventsSince(b *testing.B, c ctrlclient.Client, ns string, at time.Time) map[string]int {
	var list corev1.EventList
	require.NoError(b, c.List(context.Background(), &list, ctrlclient.InNamespace(ns)))
	out := map[string]int{}
	for _, e := range list.Items {
		// Created in the window, by the API server's clock: an Event's own
		// times are when it happened, which may be long before it is
		// written.
		if e.CreationTimestamp.Time.Before(at) {
			continue
		}
		out[fmt.Sprintf("%s %s %s", e.Source.Component+e.ReportingController, e.InvolvedObject.Kind, e.Reason)] += max(int(e.Count), 1)
	}
	return out
}

// release is one worker, one watcher and one API, each a qm process under
// the service account qm-<component> of ns, bound to cluster-admin (what
// the benchmark measures is their cost, not their roles: TestChartPods
// checks those).
type release struct {
	// components are the processes' names: restComponents, then each
	// shard's, shard-N.
	components []string
	ns         string
	procs      map[string]*process
	metrics    map[string]string
	audit      auditLog
}

// startRelease starts the release's processes on the test binary's
// cluster and a file-backed dev server of the benchmark's own, and waits
// until each serves its metrics.
func startRelease(b *testing.B, kube *testenv.Cluster, ns string, shards int) *release {
	qm := buildQM(b)
	b.Setenv("QM_CATALOG_NAMESPACES", ns) // see newProcessEnv
	temporal := testenv.FileTemporalServer(b)
	rel := &release{components: slices.Clone(restComponents), ns: ns, procs: map[string]*process{}, metrics: map[string]string{},
		audit: auditLog{path: kube.AuditLog, ns: ns}}
	for shard := range shards {
		rel.components = append(rel.components, fmt.Sprintf("shard-%d", shard))
	}
	for _, c := range rel.components {
		account := "qm-" + c
		require.NoError(b, kube.Client.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: ns}}))
		require.NoError(b, kube.Client.Create(context.Background(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + account},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ns}},
		}))
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: kube.Config.Host, CertificateAuthorityData: kube.Config.CAData}
		cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: kube.ServiceAccountToken(b, ns, account)}
		cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod", Namespace: ns}
		cfg.CurrentContext = "pod"
		kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
		require.NoError(b, clientcmd.WriteToFile(*cfg, kubeconfig))

		addr := testenv.FreeAddr(b)
		command, shard, sharded := c, "", false
		if shard, sharded = strings.CutPrefix(c, "shard-"); sharded {
			command = "watcher"
		}
		args := []string{command, "--kubeconfig", kubeconfig, "--temporal-address", temporal.FrontendHostPort(), "--log-level", "warn"}
		var env []string
		switch {
		case sharded:
			args = append(args, "--shard", fmt.Sprintf("%s/%d", shard, shards), "--leader-election-namespace", ns, "--health-addr", "0", "--metrics-addr", addr)
		case c == "worker":
			args = append(args, "--health-addr", "0", "--metrics-addr", addr)
		case c == "watcher":
			args = append(args, "--leader-election-namespace", ns, "--health-addr", "0", "--metrics-addr", addr)
		case c == "api":
			// Its metrics on a port of their own, as the chart serves them.
			args = append(args, "--namespace", ns, "--listen", testenv.FreeAddr(b), "--metrics-addr", addr)
			env = []string{"QM_OSB_USERNAME=" + testenv.OSBCredentials.Username, "QM_OSB_PASSWORD=" + testenv.OSBCredentials.Password}
		}
		rel.metrics[c] = "http://" + addr + "/metrics"
		rel.procs[c] = start(b, qm, c, env, args...)
	}
	for _, c := range rel.components {
		require.EventuallyWithT(b, func(t *assert.CollectT) { heapOf(t, rel.metrics[c]) }, time.Minute, 100*time.Millisecond,
			"the %s serves its metrics", c)
	}
	return rel
}

// settle waits until no component has written anything but its lease for
// 15 s (the Events of the set-up's changes of state included, which are
// written after them), and returns how long that took.
func (r *release) settle(b *testing.B, within time.Duration) time.Duration {
	begun := time.Now()
	quiet := 15 * time.Second
	// Each tick ends a window of quiet length: were there writes in it?
	tick := time.NewTicker(quiet)
	defer tick.Stop()
	for offset := r.audit.size(b); ; {
		<-tick.C
		next := r.audit.size(b)
		if len(r.audit.between(b, offset, next).writes(true)) == 0 {
			return time.Since(begun) - quiet
		}
		offset = next
		require.Less(b, time.Since(begun), within, "Quartermaster still writes %s after the workload is ready", within)
	}
}

// restSample is what the benchmark reads of the release at one moment.
type restSample struct {
	cpu         map[string]time.Duration
	rss, heap   map[string]int64
	others      map[string]time.Duration
	auditOffset int64
	at          time.Time
}

// sample reads each process's CPU, resident memory and Go heap in use, the
// CPU of the other processes (testenv.CPU, the test's own left out) and
// where the audit log ends.
func (r *release) sample(b *testing.B) restSample {
	s := restSample{cpu: map[string]time.Duration{}, rss: map[string]int64{}, heap: map[string]int64{}, others: testenv.CPU(),
		auditOffset: r.audit.size(b), at: time.Now()}
	delete(s.others, "qm") // the benchmark's process and, below its name, the release's: they are read one by one
	for _, c := range r.components {
		s.cpu[c], s.rss[c] = cpuOf(r.procs[c]), rssOf(r.procs[c])
		s.heap[c] = heapOf(b, r.metrics[c])
	}
	return s
}
