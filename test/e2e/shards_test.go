package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/workflows/runs"
)

// shardedProvisions is how many instances each sharded run creates.
const shardedProvisions = 40

// TestShardedWatchers runs the watcher as two, then three shards: each
// shard a qm process on a lease of its own, shard 1 with a standby. The
// instances come as kubectl users create them (no label: the first shard
// stamps them), and the leader of shard 1 is killed in the middle of
// them. Every instance and binding is handled by the one shard that owns
// its bucket, counted by who started each of its runs (a shard's Temporal
// identity), with one run that did the work. A servicebinding.io
// ServiceBinding and a ServiceBindingUsage, which only the first shard
// handles, project bindings that other shards may own, and a claim is
// the first shard's too; an SFCluster counts every shard's instances.
func TestShardedWatchers(t *testing.T) {
	t.Parallel()
	for _, count := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d shards", count), func(t *testing.T) { shardedRun(t, count) })
	}
}

func shardedRun(t *testing.T, count int) {
	e := newIsolatedProcessEnv(t)
	qm, kube, s, common := e.qm, e.kube, e.s, e.common
	ns := s.Namespace
	ctx := context.Background()
	plan := s.Plan("sharded", "  manager: {async: true}\n", testenv.Templates("instant"))
	worker := start(t, qm, "worker", nil, append([]string{"worker", "--health-addr", "0", "--metrics-addr", "0"}, common...)...)
	// The worker's Temporal identity is the SDK's default, pid@host@.
	host, err := os.Hostname()
	require.NoError(t, err)
	workerIdentity := fmt.Sprintf("%d@%s@", worker.cmd.Process.Pid, host)
	watcher := func(name string, shard int) *process {
		args := []string{"watcher", "--shard", fmt.Sprintf("%d/%d", shard, count), "--leader-election-namespace", ns,
			"--health-addr", "0", "--metrics-addr", "0", "--cluster-probe-period", "10m",
			"--leader-elect-lease-duration", leaseDuration.String(), "--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", retryPeriod.String()}
		return start(t, qm, name, nil, append(args, common...)...)
	}
	holder := func(shard int) string {
		var l coordinationv1.Lease
		name := fmt.Sprintf("qm-watcher-%d-of-%d.quartermaster.io", shard, count)
		if err := kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	// The cluster the instances go to, registered before the watchers
	// start: the first shard probes it once with no instance, and its
	// next probe is ten minutes later (--cluster-probe-period), so that
	// while the test looks only a hold can write the finalizer, however
	// long a loaded run takes to schedule the instance. Shard 1's first
	// instance there has shard 1 hold it at once (its finalizer, written
	// by the hold's field manager); the first shard counts that instance
	// only at its next probe.
	kube.Kubectl(t, fmt.Sprintf(`apiVersion: resource.servicefabrik.io/v1alpha1
kind: SFCluster
metadata: {name: "1", namespace: %s}
spec: {secretRef: unused}
`, ns), "apply", "-f", "-")
	leaders := make([]*process, count)
	for shard := range count {
		leaders[shard] = watcher(fmt.Sprintf("shard-%d", shard), shard)
		require.Eventually(t, func() bool { return holder(shard) != "" }, 30*time.Second, 50*time.Millisecond, "shard %d leads", shard)
	}
	firstHolder := holder(1)
	watcher("shard-1-standby", 1)

	// A ServiceBinding and a usage of bindings that other shards own, made
	// before the bindings are: they wait for the bindings' Secrets, which
	// the first shard learns of from the Secrets alone.
	remote, used := nameInShard("remote", 1, count), nameInShard("used", count-1, count)
	s.Kube.Kubectl(t, testenv.WebManifest(ns), "apply", "-f", "-")
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: web-remote, namespace: %s}
spec:
  service: {apiVersion: osb.servicefabrik.io/v1alpha1, kind: SFServiceBinding, name: %s-b}
  workload: {apiVersion: apps/v1, kind: Deployment, name: web}`, ns, remote))

	s.Kube.Kubectl(t, `apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: UsageKind
metadata: {name: deployment}
spec:
  displayName: Deployment
  resource: {group: apps, kind: Deployment, version: v1}
  labelsPath: spec.template.metadata.labels`, "apply", "-f", "-")
	s.Create(fmt.Sprintf(`
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: web-usage, namespace: %s}
spec:
  serviceBindingRef: {name: %s-b}
  usedBy: {kind: deployment, name: web}`, ns, used))

	names := []string{remote, used}
	for i := range shardedProvisions - len(names) {
		names = append(names, fmt.Sprintf("sh-%03d", i))
	}
	// On cluster "1", the one the worker runs in, named as a user may.
	create := func(from, to int) { createInstances(t, kube.Client, s, plan, "1", names[from:to]) }
	succeeded := func() int {
		n, err := succeededIn(kube.Client, ns, "")
		if err != nil {
			t.Logf("%v", err) // counted as none done; the next poll lists again
		}
		return n
	}
	sfcluster := func(c *assert.CollectT) *resourcev1alpha1.SFCluster {
		var sfc resourcev1alpha1.SFCluster
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "1"}, &sfc))
		return &sfc
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sfc := sfcluster(c)
		require.NotNil(c, meta.FindStatusCondition(sfc.Status.Conditions, lifecycle.ConditionReady), "probed")
		assert.Empty(c, sfc.Finalizers)
	}, 30*time.Second, 50*time.Millisecond, "SFCluster 1 is probed with no instance")
	create(0, 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sfc := sfcluster(c)
		require.Contains(c, sfc.Finalizers, starter.ClusterFinalizer)
		var managers []string
		for _, m := range sfc.ManagedFields {
			if m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), starter.ClusterFinalizer) {
				managers = append(managers, m.Manager)
			}
		}
		assert.Equal(c, []string{starter.ClusterHoldOwner}, managers, "who wrote the finalizer")
	}, 10*time.Second, 50*time.Millisecond, "shard 1 holds SFCluster 1 for %s", remote)
	create(1, shardedProvisions/2)
	require.Eventually(t, func() bool { return succeeded() > 0 }, time.Minute, 5*time.Millisecond, "provisions run")
	leaders[1].kill(t)
	t.Logf("SIGKILL of shard 1's leader with %d of %d provisions done", succeeded(), shardedProvisions)
	create(shardedProvisions/2, shardedProvisions)
	require.Eventually(t, func() bool { h := holder(1); return h != "" && h != firstHolder }, time.Minute, 20*time.Millisecond,
		"shard 1's standby takes its lease")
	require.Eventually(t, func() bool { return succeeded() == shardedProvisions }, 3*time.Minute, 100*time.Millisecond,
		"every instance succeeds (%d did)", succeeded())

	// The first shard counts every shard's instances on their cluster.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sfc := sfcluster(c)
		assert.EqualValues(c, shardedProvisions, sfc.Status.ServiceInstanceCount, "status %+v", sfc.Status)
	}, time.Minute, 50*time.Millisecond, "SFCluster 1 counts the instances of every shard")

	// A binding of a few instances, the remote and the used one among them.
	bound := names[:6]
	testenv.Parallel(t, len(bound), func(i int) error {
		return kube.Client.Create(ctx, &osbv1alpha1.SFServiceBinding{
			ObjectMeta: metav1.ObjectMeta{Name: bound[i] + "-b", Namespace: ns},
			Spec:       osbv1alpha1.SFServiceBindingSpec{ID: bound[i] + "-b", InstanceID: bound[i], ServiceID: s.ServiceID, PlanID: plan},
		})
	})
	for _, name := range bound {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var b osbv1alpha1.SFServiceBinding
			require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name + "-b"}, &b))
			assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State)
		}, time.Minute, 50*time.Millisecond, "binding %s-b succeeds", name)
	}
	// Their workflows look again on their own only after a minute
	// (usageRetry): within 20 s, the first shard woke them.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var sb sbv1.ServiceBinding
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "web-remote"}, &sb))
		assert.True(c, meta.IsStatusConditionTrue(sb.Status.Conditions, sbv1.ConditionReady), "conditions %v", sb.Status.Conditions)
		var u sc.ServiceBindingUsage
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "web-usage"}, &u))
		assert.Equal(c, sc.UsageReady, u.Status.State, "conditions %v", u.Status.Conditions)
	}, 20*time.Second, 50*time.Millisecond, "the ServiceBinding and the usage project the bindings shards %d and %d own", 1, count-1)

	// New credentials in both bindings' Secrets (a rotation's one write):
	// the first shard watches them in this namespace, where they are read,
	// and the workload rolls with both within 20 s.
	keys := []string{bindingusage.HashKey(servicebinding.UsageName("web-remote")), bindingusage.HashKey("web-usage")}
	var web appsv1.Deployment
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "web"}, &web))
	before := web.Spec.Template.Annotations
	for _, b := range []string{remote + "-b", used + "-b"} {
		var binding osbv1alpha1.SFServiceBinding
		require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: b}, &binding))
		secret := binding.Status.Response.SecretRef
		s.Kube.Kubectl(t, "", "patch", "secret", secret, "-n", ns, "--type=merge", "-p", `{"stringData":{"password":"rotated"}}`)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "web"}, &web))
		for _, key := range keys {
			assert.NotEmpty(c, before[key], "the workload carried %s", key)
			assert.NotEqual(c, before[key], web.Spec.Template.Annotations[key], "%s follows the new credentials", key)
		}
	}, 20*time.Second, 50*time.Millisecond, "the workload rolls with the bindings' new credentials")

	// A claim of a registered service that reads a binding's credentials
	// (a class over SFServiceBindings registers such services): the first
	// shard's kind. The claim's Secret follows the credentials' next change.
	var used0 osbv1alpha1.SFServiceBinding
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: used + "-b"}, &used0))
	credentials := used0.Status.Response.SecretRef
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinition:
  - {name: host, value: db.example}
  - {name: password, valueFromSecret: {name: %s, key: password}}`, ns, credentials))
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: app, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host, password]
  environmentTag: dev`, ns))
	claimed := func(c *assert.CollectT, password string) {
		var claim primazav1alpha1.ServiceClaim
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "app"}, &claim))
		require.Equal(c, primazav1alpha1.ClaimResolved, claim.Status.State)
		require.NotNil(c, claim.Status.Binding)
		var secret corev1.Secret
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: claim.Status.Binding.Name}, &secret))
		assert.Equal(c, password, string(secret.Data["password"]))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { claimed(c, "rotated") }, time.Minute, 50*time.Millisecond, "the claim is resolved")
	s.Kube.Kubectl(t, "", "patch", "secret", credentials, "-n", ns, "--type=merge", "-p", `{"stringData":{"password":"rotated-again"}}`)
	require.EventuallyWithT(t, func(c *assert.CollectT) { claimed(c, "rotated-again") }, 20*time.Second, 50*time.Millisecond,
		"the claim's Secret follows the credentials")

	// Who did what.
	perShard := make([]int, count)
	for _, name := range names {
		var inst osbv1alpha1.SFServiceInstance
		require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, &inst))
		bucket, ok := sharding.BucketOf(&inst)
		require.True(t, ok, "%s is labelled with its bucket", name)
		assert.Equal(t, sharding.Bucket(name), bucket, "%s's bucket", name)
		owner := bucket % count
		perShard[owner]++
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: ns, Name: name})
		assertStartedBy(t, s, id, owner, count)
		working, idle := s.WorkingRuns(t, id)
		assert.Equal(t, 1, working, "%s did its work in one run (beside %d idle runs)", id, idle)
	}
	for _, name := range bound {
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: ns, Name: name + "-b"})
		assertStartedBy(t, s, id, sharding.Bucket(name)%count, count)
	}
	assertStartedBy(t, s, runs.ServiceBindingID(ns, "web-remote"), 0, count)
	assertStartedBy(t, s, runs.BindingUsageID(ns, "web-usage"), 0, count)
	// A claim's run is started by the first shard, or by its allocator's
	// pass in the worker when that pass gave it a service first.
	assertStartedBy(t, s, runs.ClaimID(ns, "app"), 0, count, workerIdentity)
	t.Logf("instances per shard: %v", perShard)
	for shard, n := range perShard {
		assert.Positive(t, n, "shard %d owns some of the instances", shard)
	}
}

// nameInShard is the first name prefix-N whose bucket shard owns.
func nameInShard(prefix string, shard, count int) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf("%s-%d", prefix, i); sharding.Bucket(name)%count == shard {
			return name
		}
	}
}

// assertStartedBy checks that every run under id was started by a process
// of shard (its Temporal identity names the shard), or by the process
// whose identity is orBy, when given (the worker).
func assertStartedBy(t *testing.T, s *testenv.System, id string, shard, count int, orBy ...string) {
	t.Helper()
	resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	require.NoError(t, err, "listing the runs of %s", id)
	require.NotEmpty(t, resp.Executions, "%s has runs", id)
	want := fmt.Sprintf("qm-watcher shard %d/%d ", shard, count)
	for _, e := range resp.Executions {
		h := s.History(id, e.GetExecution().GetRunId())
		identity := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetIdentity()
		assert.True(t, strings.HasPrefix(identity, want) || slices.Contains(orBy, identity),
			"%s was started by %q, not by shard %d (nor by %v)", id, identity, shard, orBy)
	}
}
