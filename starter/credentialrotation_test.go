package starter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestCredentialsRotateOnSchedule: a binding made with a rotation policy of
// a 15 s period and a 10 s overlap (short, yet long enough for a rotation's
// work, and for a window to check the overlap in once a loaded machine has
// shown the rotation several seconds late), injected into one
// Deployment by a usage, into another by a ServiceBinding, and into a third by a claim of
// a RegisteredService that reads its Secret and by a usage (two Secrets
// that change together). Over three rotations its Secret keeps its name
// and its credentials change; the predecessor's login is there until its
// overlap ends, then gone; each Deployment's pod template changes exactly
// once per rotation, the third's too. A usage removed from it takes its
// digest along, though the rotations' one patch wrote it. The force annotation
// rotates at once; a successor that fails to bind leaves the credentials
// working, and the binding's condition says why; a plan whose bindings do
// not rotate refuses the policy; the unbind takes every successor away.
func TestCredentialsRotateOnSchedule(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("rotating", "  bindingRotatable: true", testenv.Templates("rotating"))
	fixed := s.Plan("fixed", "", testenv.Templates("rotating"))
	s.Instance("db", plan, "")
	s.WaitInstance("db", "provisioned", testenv.Succeeded(1))
	binding := func(name, planID string) {
		s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: %s, namespace: %s}
spec: {id: %s, instanceId: db, serviceId: %s, planId: %s, rotation: {every: 15s, keepFor: 10s}}`, name, s.Namespace, name, s.ServiceID, planID))
	}

	// A plan whose bindings do not rotate refuses the policy.
	binding("refused", fixed)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b := getBinding(c, s, "refused")
		assert.Equal(c, osbv1alpha1.StateFailed, b.Status.State)
		assert.Contains(c, b.Status.Description, `plan "fixed" does not rotate bindings (its bindingRotatable is not true): spec.rotation cannot be honoured`)
	}, 30*time.Second, 50*time.Millisecond, "the policy is refused")

	binding("app", plan)
	b := waitRotation(t, s, "app", 1)
	bindID := runs.WorkflowID(lifecycle.BindingTarget(b))
	recorded(t, s.History(bindID, s.ClosedRun(bindID, runs.WorkflowType(lifecycle.OpBind))), "bind-rotating")
	secretName := b.Status.Response.SecretRef
	require.NotEmpty(t, secretName)
	assert.Equal(t, &osbv1alpha1.SecretReference{Name: secretName}, b.Status.Binding, "the Secret is published for servicebinding.io")
	creds := secretData(t, s, secretName)
	assert.Equal(t, "u-app-r1", creds["user"], "the first successor's login")

	// Two workloads: web by a usage, api by a ServiceBinding to the binding.
	s.Kube.Kubectl(t, testenv.WebManifest(s.Namespace), "apply", "-f", "-")
	s.Kube.Kubectl(t, strings.ReplaceAll(testenv.WebManifest(s.Namespace), "web", "api"), "apply", "-f", "-")
	deployments := usageKind(t, s, "deployment", deploymentKind)
	createUsage(t, s, "web-db", deployments, "web", "{name: app}", "")
	s.Create(fmt.Sprintf(`
apiVersion: servicebinding.io/v1
kind: ServiceBinding
metadata: {name: api-db, namespace: %s}
spec:
  service: {apiVersion: osb.servicefabrik.io/v1alpha1, kind: SFServiceBinding, name: app}
  workload: {apiVersion: apps/v1, kind: Deployment, name: api}`, s.Namespace))
	// A third, orders, by a claim of a RegisteredService that reads the
	// binding's Secret.
	s.Kube.Kubectl(t, appDeployment(s, "orders", "team: shop"), "apply", "-f", "-")
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: app-db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: rotating}]
  serviceEndpointDefinition:
  - {name: user, valueFromSecret: {name: %s, key: user}}
  - {name: password, valueFromSecret: {name: %s, key: password}}`, s.Namespace, secretName, secretName))
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: orders-db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: rotating}]
  serviceEndpointDefinitionKeys: [user, password]
  environmentTag: dev
  application: {apiVersion: apps/v1, kind: Deployment, name: orders}`, s.Namespace))
	// orders also uses the binding itself: its two Secrets, the binding's
	// and the claim's copy, change together and roll it once.
	createUsage(t, s, "orders-app", deployments, "orders", "{name: app}", "")
	type projection struct{ deployment, key string }
	hashKeys := []projection{{"web", bindingusage.HashKey("web-db")}, {"api", bindingusage.HashKey(servicebinding.UsageName("api-db"))},
		{"orders", bindingusage.HashKey(servicebinding.UsageName("orders-db"))}, {"orders", bindingusage.HashKey("orders-app")}}
	// projected waits until each Deployment carries the hash of each Secret
	// it projects (the claim's, once it has the binding's password), and
	// returns their generations.
	projected := func() map[string]int64 {
		t.Helper()
		published := secretBytes(t, s, secretName)
		want := bindingusage.Hash(published)
		var claimed string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var claimSecret corev1.Secret
			require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "orders-db"}, &claimSecret))
			assert.Equal(c, string(published["password"]), string(claimSecret.Data["password"]), "the claim's Secret follows")
			claimed = bindingusage.Hash(claimSecret.Data)
		}, 30*time.Second, 50*time.Millisecond, "the claim's Secret has the binding's credentials")
		gens := map[string]int64{}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, p := range hashKeys {
				hash := want
				if p.key == bindingusage.HashKey(servicebinding.UsageName("orders-db")) {
					hash = claimed
				}
				d := getDeployment(c, s, p.deployment)
				assert.Equal(c, hash, d.Spec.Template.Annotations[p.key], "the pod template of %s carries %s", p.deployment, p.key)
				gens[p.deployment] = d.Generation
			}
		}, 30*time.Second, 50*time.Millisecond, "every Deployment carries the credentials")
		return gens
	}
	gens := projected()

	for gen := int64(2); gen <= 4; gen++ {
		predecessorLogin := fmt.Sprintf("db-login-app-r%d", gen-1)
		requireConfigMap(t, s, predecessorLogin, true)
		b = waitRotation(t, s, "app", gen)
		assert.Equal(t, secretName, b.Status.Response.SecretRef, "the Secret's name stays")
		now := secretData(t, s, secretName)
		assert.NotEqual(t, creds["password"], now["password"], "rotation %d changes the credentials", gen-1)
		assert.Equal(t, "u-app-r1", now["user"], "the successor keeps the predecessor's user, as the plan says")
		creds = now

		// The predecessor's login stays for the overlap, then goes.
		require.Len(t, b.Status.Rotation.Retiring, 1)
		until := b.Status.Rotation.Retiring[0].Until.Time
		assert.Equal(t, fmt.Sprintf("app-r%d", gen-1), b.Status.Rotation.Retiring[0].Binding)
		assert.WithinDuration(t, b.Status.Rotation.LastRotated.Add(10*time.Second), until, time.Second)
		// The rotation is seen well within its ten seconds of overlap.
		staysThroughOverlap(t, until, func() error {
			return s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: predecessorLogin}, &corev1.ConfigMap{})
		}, "the predecessor's login "+predecessorLogin)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: predecessorLogin}, &corev1.ConfigMap{})
			assert.True(c, apierrors.IsNotFound(err), "the predecessor's login is gone: %v", err)
		}, 30*time.Second, 50*time.Millisecond, "the predecessor of generation %d is unbound", gen)
		assert.False(t, time.Now().Before(until.Add(-time.Second)), "not before its overlap ended (%s)", until)

		// Each pod template changed exactly once.
		next := projected()
		for name, was := range gens {
			assert.Equal(t, was+1, next[name], "rotation %d rolls %s once", gen-1, name)
		}
		gens = next
	}

	// The usage goes, with its digest; the claim's stays.
	require.NoError(t, s.Kube.Client.Delete(ctx, getUsage(t, s, "orders-app")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := getDeployment(c, s, "orders")
		assert.NotContains(c, d.Spec.Template.Annotations, bindingusage.HashKey("orders-app"), "the removed usage's digest is gone")
		assert.Contains(c, d.Spec.Template.Annotations, bindingusage.HashKey(servicebinding.UsageName("orders-db")))
		var env []string
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			env = append(env, e.Name)
		}
		assert.Equal(c, []string{bindingusage.BindingRootEnv}, env, "the usage's variables are gone, the claim's stays")
	}, 30*time.Second, 50*time.Millisecond, "the usage of orders is removed")

	// The force annotation rotates at once, well within the period.
	forced := time.Now()
	s.Kube.Kubectl(t, "", "annotate", "sfservicebinding", "app", "-n", s.Namespace, osbv1alpha1.RotateAnnotation+"=one")
	b = waitRotation(t, s, "app", 5)
	assert.Less(t, b.Status.Rotation.LastRotated.Sub(forced.Truncate(time.Second)), 15*time.Second)
	assert.Equal(t, "one", b.Status.Rotation.Forced)
	creds = secretData(t, s, secretName)

	// A successor that fails leaves the credentials as they are.
	s.Kube.Kubectl(t, "", "patch", "sfservicebinding", "app", "-n", s.Namespace, "--type=merge", "-p", `{"spec":{"parameters":{"fail":true}}}`)
	s.Kube.Kubectl(t, "", "annotate", "--overwrite", "sfservicebinding", "app", "-n", s.Namespace, osbv1alpha1.RotateAnnotation+"=two")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b := getBinding(c, s, "app")
		cond := meta.FindStatusCondition(b.Status.Conditions, osbv1alpha1.ConditionRotated)
		if assert.NotNil(c, cond) {
			assert.Equal(c, "False", string(cond.Status))
			assert.Equal(c, "generation 6 failed: the successor's bind failed: the database refused the login; the credentials of app-r5 stay", cond.Message)
		}
		assert.EqualValues(c, 5, b.Status.Rotation.Generation)
	}, 30*time.Second, 50*time.Millisecond, "the failed rotation is on the binding's condition")
	assert.Equal(t, creds, secretData(t, s, secretName), "the credentials still work")
	requireConfigMap(t, s, "db-login-app-r5", true)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app-r6"}, &osbv1alpha1.SFServiceBinding{})
		assert.True(c, apierrors.IsNotFound(err), "the failed successor is unbound: %v", err)
	}, 30*time.Second, 50*time.Millisecond)

	// The unbind takes every successor, and their logins, away.
	require.NoError(t, s.Kube.Client.Delete(ctx, &osbv1alpha1.SFServiceBinding{ObjectMeta: metaName(s.Namespace, "app")}))
	s.WaitGone(&osbv1alpha1.SFServiceBinding{ObjectMeta: metaName(s.Namespace, "app")})
	var left osbv1alpha1.SFServiceBindingList
	require.NoError(t, s.Kube.Client.List(ctx, &left, ctrlclient.InNamespace(s.Namespace)))
	for _, l := range left.Items {
		assert.Equal(t, "refused", l.Name, "no successor is left")
	}
	requireConfigMap(t, s, "db-login-app-r5", false)
	recorded(t, s.History(bindID, s.ClosedRun(bindID, runs.WorkflowType(lifecycle.OpUnbind))), "unbind-rotating")
	rotationID := runs.CredentialRotationID(s.Namespace, "app")
	recorded(t, s.History(rotationID, s.ClosedRun(rotationID, runs.CredentialRotationType)), "credential-rotation")
}

// waitRotation waits until the binding has published generation gen and
// its operation succeeded, and returns it.
func waitRotation(t *testing.T, s *testenv.System, name string, gen int64) *osbv1alpha1.SFServiceBinding {
	t.Helper()
	var b *osbv1alpha1.SFServiceBinding
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		b = getBinding(c, s, name)
		assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State, b.Status.Description)
		if assert.NotNil(c, b.Status.Rotation) {
			assert.Equal(c, gen, b.Status.Rotation.Generation)
		}
	}, 45*time.Second, 50*time.Millisecond, "binding %s publishes generation %d", name, gen)
	return b
}

// staysThroughOverlap asserts that get finds the retired login at every
// look until a second before its overlap ends (until). A rotation seen too
// late to leave any of that window fails here rather than checking
// nothing.
func staysThroughOverlap(t *testing.T, until time.Time, get func() error, login string) {
	t.Helper()
	overlap := time.Until(until) - time.Second
	if assert.Positive(t, overlap, "the rotation was seen with its overlap still to run") {
		assert.Never(t, func() bool { return get() != nil }, overlap, 50*time.Millisecond, "%s stays through the overlap", login)
	}
}

func getBinding(c require.TestingT, s *testenv.System, name string) *osbv1alpha1.SFServiceBinding {
	var b osbv1alpha1.SFServiceBinding
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &b))
	return &b
}

func secretBytes(t *testing.T, s *testenv.System, name string) map[string][]byte {
	t.Helper()
	var secret corev1.Secret
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &secret))
	return secret.Data
}

func secretData(t *testing.T, s *testenv.System, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range secretBytes(t, s, name) {
		out[k] = string(v)
	}
	return out
}

// requireConfigMap says that the ConfigMap exists, or not.
func requireConfigMap(t *testing.T, s *testenv.System, name string, exists bool) {
	t.Helper()
	err := s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &corev1.ConfigMap{})
	if exists {
		require.NoError(t, err, "ConfigMap %s exists", name)
		return
	}
	require.True(t, apierrors.IsNotFound(err), "ConfigMap %s is gone: %v", name, err)
}

// TestTourRotatesTheTenantSample is the README tour's fourth step on the
// tenant-namespace sample: a binding of tenant-1 that rotates, its Secret
// naming the binding's ServiceAccount; `quartermaster.io/rotate=now`
// rotates at once, the Secret then names another ServiceAccount, the old
// one works through the overlap and goes after it, and the successors
// are listed by their label.
func TestTourRotatesTheTenantSample(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	s.Instance("tenant-1", testenv.TenantPlan, "")
	tenantNS := nsOf(t, s.WaitInstance("tenant-1", "provisioned", testenv.Succeeded(1)))
	s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: ci, namespace: %s}
spec: {id: ci, instanceId: tenant-1, serviceId: %s, planId: %s, rotation: {every: 1h, keepFor: 15s}}`, s.Namespace, testenv.TenantService, testenv.TenantPlan))
	b := waitRotation(t, s, "ci", 1)
	secret := b.Status.Response.SecretRef
	first := secretData(t, s, secret)["serviceAccount"]
	require.NotEmpty(t, first, "the Secret names the binding's ServiceAccount")
	serviceAccount := func(name string) error {
		return s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: name}, &corev1.ServiceAccount{})
	}
	require.NoError(t, serviceAccount(first), "the login exists in the tenant's namespace")

	s.Kube.Kubectl(t, "", "annotate", "--overwrite", "sfservicebinding", "ci", "-n", s.Namespace, osbv1alpha1.RotateAnnotation+"=now")
	b = waitRotation(t, s, "ci", 2)
	second := secretData(t, s, secret)["serviceAccount"]
	assert.NotEqual(t, first, second, "another login after the rotation, under the same Secret")
	require.NoError(t, serviceAccount(second))
	require.Len(t, b.Status.Rotation.Retiring, 1)
	until := b.Status.Rotation.Retiring[0].Until.Time
	staysThroughOverlap(t, until, func() error { return serviceAccount(first) }, "the old login "+first)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(serviceAccount(first)), "the old login is gone after the overlap")
	}, 30*time.Second, 50*time.Millisecond, "the old ServiceAccount goes")
	// The old login goes in the middle of its successor's unbind; the
	// successor itself goes as the unbind ends.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var list osbv1alpha1.SFServiceBindingList
		require.NoError(c, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace), ctrlclient.HasLabels{osbv1alpha1.RotationOfLabel}))
		var names []string
		for _, sb := range list.Items {
			names = append(names, sb.Name)
		}
		assert.Equal(c, []string{b.Status.Rotation.Current}, names)
	}, 30*time.Second, 50*time.Millisecond, "the current successor alone, once the overlap is over")
	out := s.Kube.Kubectl(t, "", "get", "sfservicebindings", "-n", s.Namespace, "-l", osbv1alpha1.RotationOfLabel, "-o", "name")
	assert.Equal(t, "sfservicebinding.osb.servicefabrik.io/"+b.Status.Rotation.Current+"\n", out, "as kubectl shows it")
}
