package starter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// usageSystem runs Quartermaster with a succeeded binding "db" whose
// credentials Secret holds user=u, and returns the Secret's name. With
// parallel, beside the package's other parallel tests: its watcher then
// watches its namespace only and writes no UsageKind's count of usages or
// protection, which a test of those needs (serial, watching every
// namespace).
func usageSystem(t *testing.T, parallel bool) (*testenv.System, string) {
	t.Helper()
	s := testenv.Start(t, testenv.Parts{Parallel: parallel, Worker: true, Watcher: true})
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("db", plan, "")
	s.WaitInstance("db", "provisioned", testenv.Succeeded(1))
	return s, s.Bind("db", "db", plan).Status.Response.SecretRef
}

// usageKind creates a UsageKind named after the test's namespace (kinds
// are cluster-wide), and returns its name.
func usageKind(t *testing.T, s *testenv.System, name, spec string) string {
	t.Helper()
	full := s.Namespace + "-" + name
	s.Create(fmt.Sprintf("apiVersion: servicecatalog.kyma-project.io/v1alpha1\nkind: UsageKind\nmetadata: {name: %s}\nspec:\n%s", full, spec))
	t.Cleanup(func() {
		_ = s.Kube.Client.Delete(context.Background(), &sc.UsageKind{ObjectMeta: metaName("", full)})
	})
	return full
}

// deploymentKind is the UsageKind of Deployments.
const deploymentKind = `  displayName: Deployment
  resource: {group: apps, kind: deployment, version: v1}
  labelsPath: spec.template.metadata.labels`

// createUsage creates a ServiceBindingUsage; params is the YAML of its
// spec.parameters, or empty.
func createUsage(t *testing.T, s *testenv.System, name, kind, workload, binding, params string) {
	t.Helper()
	if params != "" {
		params = "\n  parameters: " + params
	}
	s.Create(fmt.Sprintf(`
apiVersion: servicecatalog.kyma-project.io/v1alpha1
kind: ServiceBindingUsage
metadata: {name: %s, namespace: %s}
spec:
  serviceBindingRef: %s
  usedBy: {kind: %s, name: %s}%s`, name, s.Namespace, binding, kind, workload, params))
}

func getUsage(c require.TestingT, s *testenv.System, name string) *sc.ServiceBindingUsage {
	var u sc.ServiceBindingUsage
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &u))
	return &u
}

// waitUsage waits until the usage is in state with the Ready condition's
// reason, and returns it.
func waitUsage(t *testing.T, s *testenv.System, name string, state sc.UsageState, reason string) *sc.ServiceBindingUsage {
	t.Helper()
	var u *sc.ServiceBindingUsage
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		u = getUsage(c, s, name)
		ready := meta.FindStatusCondition(u.Status.Conditions, "Ready")
		require.NotNil(c, ready)
		assert.Equal(c, state, u.Status.State, ready.Message)
		assert.Equal(c, reason, ready.Reason, ready.Message)
		assert.Equal(c, u.Generation, u.Status.ObservedGeneration)
	}, 30*time.Second, 50*time.Millisecond, "usage %s becomes %s (%s)", name, state, reason)
	return u
}

func getDeployment(c require.TestingT, s *testenv.System, name string) *appsv1.Deployment {
	var d appsv1.Deployment
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &d))
	return &d
}

// noRollout asserts that the Deployment web stays at generation gen for
// two seconds, every look of them: a rollout the watcher starts late shows
// too, where a single look right after the change would miss it.
func noRollout(t *testing.T, s *testenv.System, gen int64, msg string) {
	t.Helper()
	assert.Never(t, func() bool {
		var d appsv1.Deployment
		err := s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "web"}, &d)
		return err != nil || d.Generation != gen
	}, 2*time.Second, 20*time.Millisecond, msg)
}

// injected says whether a pod template carries the usage's injection of
// the Secret's key user as DB_user.
func injected(c assert.TestingT, tpl corev1.PodTemplateSpec, usage, secret string) bool {
	want := corev1.EnvVar{Name: "DB_user", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "user"}}}
	return assert.Contains(c, tpl.Spec.Containers[0].Env, want) &&
		assert.Equal(c, "true", tpl.Labels[bindingusage.LabelKey(usage)]) &&
		assert.NotEmpty(c, tpl.Annotations[bindingusage.HashKey(usage)])
}

// TestUsageInjectsIntoADeployment injects a binding into a Deployment:
// a new ReplicaSet rolls out with the variables; drift (a kubectl apply of
// the original, a replace, a re-creation) gets them back; a new Secret
// rolls out again; removing the usage restores exactly the user's
// template.
func TestUsageInjectsIntoADeployment(t *testing.T) {
	s, secret := usageSystem(t, true)
	ctx := context.Background()
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	var original corev1.PodTemplateSpec
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := getDeployment(c, s, "web")
		assert.EqualValues(c, 1, d.Status.AvailableReplicas)
		original = d.Spec.Template
	}, 30*time.Second, 50*time.Millisecond, "the user's Deployment is available")

	kind := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "web-db", kind, "web", "{name: db}", "{envPrefix: {name: DB_}}")
	u := waitUsage(t, s, "web-db", sc.UsageReady, "Injected")
	assert.Equal(t, []string{"DB_user"}, u.Status.Env)
	assert.Equal(t, secret, u.Status.Secret)
	require.NotNil(t, u.Status.UsageKind)
	assert.Equal(t, sc.ResourceReference{Group: "apps", Version: "v1", Kind: "Deployment"}, u.Status.UsageKind.Resource, "the snapshot has the served kind")

	// A new ReplicaSet rolls out; its pods carry the variable.
	podsWithBinding := func(c *assert.CollectT) []corev1.Pod {
		var pods corev1.PodList
		require.NoError(c, s.Kube.Client.List(ctx, &pods, ctrlclient.InNamespace(s.Namespace),
			ctrlclient.MatchingLabels{"app": "web", bindingusage.LabelKey("web-db"): "true"}))
		return pods.Items
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := getDeployment(c, s, "web")
		injected(c, d.Spec.Template, "web-db", secret)
		assert.Equal(c, d.Generation, d.Status.ObservedGeneration)
		assert.EqualValues(c, 1, d.Status.UpdatedReplicas)
		assert.EqualValues(c, 1, d.Status.AvailableReplicas)
		pods := podsWithBinding(c)
		if assert.Len(c, pods, 1) {
			assert.Equal(c, corev1.PodRunning, pods[0].Status.Phase)
			assert.Contains(c, envNames(pods[0]), "DB_user")
			assert.Contains(c, envNames(pods[0]), "MODE", "the user's variable stays")
		}
	}, 60*time.Second, 100*time.Millisecond, "the injection rolls out")
	hash := getDeployment(t, s, "web").Spec.Template.Annotations[bindingusage.HashKey("web-db")]

	// A kubectl apply of the original manifest keeps the injection: it
	// removes only what the user applied before.
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	applied := getDeployment(t, s, "web")
	injected(t, applied.Spec.Template, "web-db", secret)
	noRollout(t, s, applied.Generation, "a kubectl apply of the original neither removes the injection nor rolls out")

	// A replace with the user's template drops it; it comes back.
	d := getDeployment(t, s, "web")
	d.Spec.Template = *original.DeepCopy()
	require.NoError(t, s.Kube.Client.Update(ctx, d))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		injected(c, getDeployment(c, s, "web").Spec.Template, "web-db", secret)
	}, 15*time.Second, 50*time.Millisecond, "the injection comes back after a replace")

	// Deleted and created again: it comes back.
	require.NoError(t, s.Kube.Client.Delete(ctx, getDeployment(t, s, "web")))
	s.WaitGone(&appsv1.Deployment{ObjectMeta: metaName(s.Namespace, "web")})
	waitUsage(t, s, "web-db", sc.UsagePending, "WorkloadNotFound")
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		injected(c, getDeployment(c, s, "web").Spec.Template, "web-db", secret)
	}, 15*time.Second, 50*time.Millisecond, "the injection comes back after a re-creation")
	waitUsage(t, s, "web-db", sc.UsageReady, "Injected")

	// New credentials roll the workload out.
	var creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: secret}, &creds))
	creds.Data["user"] = []byte("rotated")
	require.NoError(t, s.Kube.Client.Update(ctx, &creds))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := getDeployment(c, s, "web")
		assert.NotEqual(c, hash, d.Spec.Template.Annotations[bindingusage.HashKey("web-db")])
		assert.Equal(c, d.Generation, d.Status.ObservedGeneration)
		assert.EqualValues(c, 1, d.Status.UpdatedReplicas)
	}, 30*time.Second, 50*time.Millisecond, "the new Secret rolls the workload out")

	// An edit of the usage that injects the same does not restart it: the
	// usage moves to another UsageKind of the same workloads. Its run
	// takes the edit (the status speaks of the new generation and kind),
	// and the workload's template stays as it was.
	gen := getDeployment(t, s, "web").Generation
	sameKind := usageKind(t, s, "deployment-too", deploymentKind)
	u = getUsage(t, s, "web-db")
	u.Spec.UsedBy.Kind = sameKind
	require.NoError(t, s.Kube.Client.Update(ctx, u))
	u = waitUsage(t, s, "web-db", sc.UsageReady, "Injected")
	require.NotNil(t, u.Status.UsageKind)
	assert.Equal(t, sameKind, u.Status.UsageKind.Name, "the run took the edit")
	noRollout(t, s, gen, "no rollout for an edit that changes nothing injected")

	// Removing the usage restores exactly the user's template.
	require.NoError(t, s.Kube.Client.Delete(ctx, getUsage(t, s, "web-db")))
	s.WaitGone(&sc.ServiceBindingUsage{ObjectMeta: metaName(s.Namespace, "web-db")})
	assert.Equal(t, original, getDeployment(t, s, "web").Spec.Template, "nothing of the injection is left")

	// The usage's run ended with it; its history holds names, never values.
	id := runs.BindingUsageID(s.Namespace, "web-db")
	h := s.History(id, s.ClosedRun(id, runs.BindingUsageType))
	assert.Contains(t, testenv.HistoryText(h), secret)
	assert.NotContains(t, testenv.HistoryText(h), "rotated", "credentials never enter the history")
	recorded(t, h, "binding-usage")
}

// TestUsageNeverOverwritesTheUsersVariable: a variable of the same name
// that the user set is a conflict, not an overwrite.
func TestUsageNeverOverwritesTheUsersVariable(t *testing.T) {
	s, _ := usageSystem(t, true)
	s.Kube.Kubectl(t, strings.Replace(testenv.WebManifest(s.Namespace), "{name: MODE, value: prod}", "{name: DB_user, value: mine}", 1), "apply", "-f", "-")
	kind := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "web-db", kind, "web", "{name: db}", "{envPrefix: {name: DB_}}")
	u := waitUsage(t, s, "web-db", sc.UsageFailed, "Conflict")
	assert.Contains(t, meta.FindStatusCondition(u.Status.Conditions, "Ready").Message, `container "app" already has the environment variable DB_user`)
	env := getDeployment(t, s, "web").Spec.Template.Spec.Containers[0].Env
	assert.Equal(t, []corev1.EnvVar{{Name: "DB_user", Value: "mine"}}, env)
}

func envNames(p corev1.Pod) []string {
	var out []string
	for _, e := range p.Spec.Containers[0].Env {
		out = append(out, e.Name)
	}
	return out
}

func metaName(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
