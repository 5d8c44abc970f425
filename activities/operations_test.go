package activities_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// passwordPlan renders a ConfigMap with a generated password and the
// cluster it runs on; its status template reports bind credentials and
// waits for a "gate" source before the provision succeeds.
const passwordPlan = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-db}
      data:
        password: {{ generatePassword "password" 12 }}
        cluster: {{ .cluster.metadata.name | quote }}
  - action: sources
    type: gotemplate
    content: |
      gate: {apiVersion: v1, kind: ConfigMap, name: {{ .instance.metadata.name }}-gate}
  - action: status
    type: gotemplate
    content: |
      provision:
        state: {{ if .gate }}succeeded{{ else }}in progress{{ end }}
        description: {{ if .gate }}ready{{ else }}waiting for the gate{{ end }}
      bind:
        state: succeeded
        response: {credentials: {password: {{ registry "password" | quote }}, port: 5432}}
`

// harness runs activities on the real API server, as the worker does.
type harness struct {
	t   *testing.T
	sys *testenv.System
	ops *activities.Operations
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, testenv.Parts{})
}

// newHarnessOn is newHarness on a System of parts (Bare: an API server
// with no garbage collector).
func newHarnessOn(t *testing.T, parts testenv.Parts) *harness {
	t.Helper()
	sys := testenv.Start(t, parts)
	catalog := tenancy.Boundary{Catalog: []string{sys.Namespace}}
	cache, err := offerings.New(sys.Kube.Config, crds.NewScheme(), "", catalog)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, cache.Start(ctx))
	return &harness{t: t, sys: sys, ops: &activities.Operations{Client: sys.Kube.Client, Offerings: cache, Catalog: catalog}}
}

// plan registers a plan and waits until the offerings cache serves it.
func (h *harness) plan(name, templates string) string {
	h.t.Helper()
	id := h.sys.Plan(name, "", templates)
	require.Eventually(h.t, func() bool {
		_, err := h.ops.Offerings.PlanFor(context.Background(), id, h.sys.Namespace)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return id
}

// run executes the activity named activity as a local activity, as the
// workflows do, in a run of its own: the Operations that serves one run
// keeps what it read for the run's next steps.
func (h *harness) run(activity string, args ...any) (converter.EncodedValue, error) {
	return h.runOn(h.worker(), activity, args...)
}

// worker is the Operations of a worker of its own.
func (h *harness) worker() *activities.Operations {
	return &activities.Operations{Client: h.ops.Client, Offerings: h.ops.Offerings, Catalog: h.ops.Catalog}
}

// runOn is run on ops: the steps that one worker runs of one run share
// it, and with it what it read.
func (h *harness) runOn(ops *activities.Operations, activity string, args ...any) (converter.EncodedValue, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(ops)
	return env.ExecuteLocalActivity(reflect.ValueOf(ops).MethodByName(activity).Interface(), args...)
}

func applicationError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr, "want an application error, got %v", err)
	return appErr
}

func TestApplyTemplatesIsIdempotent(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	planID := h.plan("pw", passwordPlan)
	inst := h.sys.Instance("db-1", planID, "")
	target := lifecycle.InstanceTarget(inst)

	apply := func() []osbv1alpha1.Source {
		val, err := h.run("ApplyTemplates", target, lifecycle.OpProvision)
		require.NoError(t, err)
		var refs []osbv1alpha1.Source
		require.NoError(t, val.Get(&refs))
		return refs
	}
	refs := apply()
	assert.Equal(t, []osbv1alpha1.Source{{APIVersion: "v1", Kind: "ConfigMap", Name: "db-1-db", Namespace: h.sys.Namespace}}, refs)

	var cm corev1.ConfigMap
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "db-1-db"}, &cm))
	password := cm.Data["password"]
	assert.Len(t, password, 12)
	assert.Equal(t, "1", cm.Data["cluster"], ".cluster is the cluster Quartermaster runs in")
	assert.Equal(t, password, h.sys.RegistryValue("qm-instance-db-1", "password"))
	var reg corev1.Secret
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-db-1"}, &reg))
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, reg.UID, cm.OwnerReferences[0].UID, "the registry owns what the instance applied")

	assert.Equal(t, refs, apply(), "a retry applies the same objects")
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&cm), &cm))
	assert.Equal(t, password, cm.Data["password"], "and renders the same password")
}

func TestActivityErrors(t *testing.T) {
	h := newHarness(t)
	broken := h.plan("broken", testenv.Templates("broken"))
	refused := h.plan("refused", testenv.Templates("refused"))
	for _, tc := range []struct {
		name, inst, plan string
		activity         string
		wantType         string
		want             string
	}{
		{"a template that does not parse", "broken-1", broken, "ApplyTemplates",
			activities.ErrTemplate, `provision template: template: provision:4: function "required" not defined`},
		{"an object the API server refuses", "refused-1", refused, "ApplyTemplates",
			activities.ErrApply, `ConfigMap "Not_A_Valid_Name" is invalid`},
		{"an unknown plan", "unknown-1", "no-such-plan", "Begin",
			activities.ErrPlan, `unknown plan "no-such-plan": no SFPlan has this spec.id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := h.sys.Instance(tc.inst, tc.plan, "")
			_, err := h.run(tc.activity, lifecycle.InstanceTarget(inst), lifecycle.OpProvision)
			require.Error(t, err)
			appErr := applicationError(t, err)
			assert.Equal(t, tc.wantType, appErr.Type())
			assert.True(t, appErr.NonRetryable(), "retrying cannot fix it")
			assert.Contains(t, appErr.Message(), tc.want)
		})
	}

	// A render that fails writes nothing, the registry included: a fresh
	// target's registry is created with what its render stored.
	err := h.sys.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-broken-1"}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "no registry for a template that does not parse: %v", err)

	t.Run("an update begun after its instance's deletion", func(t *testing.T) {
		inst := h.sys.Instance("deleted-1", h.plan("deleting", passwordPlan), "")
		inst.Finalizers = []string{osbv1alpha1.InstanceFinalizer}
		require.NoError(t, h.sys.Kube.Client.Update(context.Background(), inst))
		require.NoError(t, h.sys.Kube.Client.Delete(context.Background(), inst))
		val, err := h.run("Begin", lifecycle.InstanceTarget(inst), lifecycle.OpUpdate)
		require.NoError(t, err)
		var begun activities.Begun
		require.NoError(t, val.Get(&begun))
		assert.Equal(t, activities.Begun{Done: true}, begun, "nothing to apply: the removal follows")
	})

	t.Run("an update replayed after its instance's deletion, its work done before it", func(t *testing.T) {
		// The status a lost first task wrote: generation 2 succeeded.
		inst := h.sys.Instance("deleted-2", h.plan("deleting-2", passwordPlan), "")
		inst.Finalizers = []string{osbv1alpha1.InstanceFinalizer}
		inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"size": "m"}`)}
		require.NoError(t, h.sys.Kube.Client.Update(context.Background(), inst))
		require.EqualValues(t, 2, inst.Generation)
		inst.Status.State, inst.Status.ObservedGeneration = osbv1alpha1.StateSucceeded, 2
		require.NoError(t, h.sys.Kube.Client.Status().Update(context.Background(), inst))
		require.NoError(t, h.sys.Kube.Client.Delete(context.Background(), inst))
		val, err := h.run("Begin", lifecycle.InstanceTarget(inst), lifecycle.OpUpdate)
		require.NoError(t, err)
		var begun activities.Begun
		require.NoError(t, val.Get(&begun))
		assert.Equal(t, activities.Begun{Done: true, Generation: 2}, begun, "nothing to apply, and generation 2 found done")
	})

	t.Run("a target deleted meanwhile", func(t *testing.T) {
		_, err := h.run("Begin", lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: h.sys.Namespace, Name: "never-was"}, lifecycle.OpProvision)
		appErr := applicationError(t, err)
		assert.Equal(t, activities.ErrGone, appErr.Type())
	})
}

func TestObserveAndFinish(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	planID := h.plan("pw", passwordPlan)
	inst := h.sys.Instance("db-2", planID, "")
	target := lifecycle.InstanceTarget(inst)
	_, err := h.run("ApplyTemplates", target, lifecycle.OpProvision)
	require.NoError(t, err)

	observe := func(tg lifecycle.Target, op lifecycle.Operation) activities.Outcome {
		val, err := h.run("Observe", tg, op)
		require.NoError(t, err)
		var o activities.Outcome
		require.NoError(t, val.Get(&o))
		return o
	}
	assert.Equal(t, activities.Outcome{State: osbv1alpha1.StateInProgress, Description: "waiting for the gate"}, observe(target, lifecycle.OpProvision))
	h.sys.OpenGate("db-2", "gate")
	done := activities.Outcome{State: osbv1alpha1.StateSucceeded, Description: "ready"}
	assert.Equal(t, done, observe(target, lifecycle.OpProvision))

	_, err = h.run("Finish", target, lifecycle.OpProvision, int64(1), done, []osbv1alpha1.Source(nil))
	require.NoError(t, err)
	got, err := h.sys.GetInstance("db-2")
	require.NoError(t, err)
	assert.Equal(t, osbv1alpha1.StateSucceeded, got.Status.State)
	assert.NotNil(t, got.Status.AppliedSpec)
	assert.Zero(t, got.Status.AppliedPlanGeneration, "each step here is a new worker, which did not render the plan: it records no generation")
	assert.Equal(t, "ProvisionSucceeded", got.Status.Conditions[0].Reason)

	val, err := h.run("Begin", target, lifecycle.OpProvision)
	require.NoError(t, err)
	var begun activities.Begun
	require.NoError(t, val.Get(&begun))
	assert.Equal(t, activities.Begun{Done: true, Generation: 1}, begun, "the same provision again has nothing to do, and says what it found done")

	// A bind's credentials go to a Secret, not into the outcome.
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: h.sys.Namespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: "app-1", InstanceID: "db-2", ServiceID: h.sys.ServiceID, PlanID: planID},
	}
	require.NoError(t, h.sys.Kube.Client.Create(ctx, b))
	bound := observe(lifecycle.BindingTarget(b), lifecycle.OpBind)
	assert.Equal(t, activities.Outcome{State: osbv1alpha1.StateSucceeded}, bound)
	var creds corev1.Secret
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-credentials-app-1"}, &creds))
	assert.Equal(t, h.sys.RegistryValue("qm-instance-db-2", "password"), string(creds.Data["password"]))
	assert.Equal(t, "5432", string(creds.Data["port"]))
	assert.Equal(t, "port", creds.Annotations[osbv1alpha1.CredentialsJSONKeysAnnotation])

	// An unbind that succeeded deletes the credentials and the registry,
	// and releases the finalizer.
	require.NoError(t, h.sys.Kube.Client.Delete(ctx, b))
	_, err = h.run("Finish", lifecycle.BindingTarget(b), lifecycle.OpUnbind, int64(1), activities.Outcome{State: osbv1alpha1.StateSucceeded}, []osbv1alpha1.Source(nil))
	require.NoError(t, err)
	for _, obj := range []ctrlclient.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.sys.Namespace, Name: "qm-credentials-app-1"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.sys.Namespace, Name: "qm-binding-app-1"}},
		b,
	} {
		err := h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)
		assert.True(t, apierrors.IsNotFound(err), "%T %s is gone: %v", obj, obj.GetName(), err)
	}
}

// TestRemoveBindings: an instance being deprovisioned as kubectl asks
// waits for its bindings: none is deleted, and condition InUse and the
// status name them. With quartermaster.io/deprovision-in-use (as the OSB
// API deprovisions) its bindings are deleted (their finalizers then hold
// them for their Unbind runs), the instance says how many it waits for,
// and none left is 0.
func TestRemoveBindings(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	planID := h.plan("pw", passwordPlan)
	inst := h.sys.Instance("owner-1", planID, "")
	other := h.sys.Instance("other-1", planID, "")
	for name, instance := range map[string]string{"b-1": "owner-1", "b-2": "owner-1", "b-other": "other-1"} {
		require.NoError(t, h.sys.Kube.Client.Create(ctx, &osbv1alpha1.SFServiceBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.sys.Namespace},
			Spec:       osbv1alpha1.SFServiceBindingSpec{ID: name, InstanceID: instance, ServiceID: h.sys.ServiceID, PlanID: planID},
		}))
	}
	removeBindings := func() int {
		t.Helper()
		val, err := h.run("RemoveBindings", lifecycle.InstanceTarget(inst))
		require.NoError(t, err)
		var left int
		require.NoError(t, val.Get(&left))
		return left
	}

	// In use: nothing is deleted, the users are named.
	assert.Equal(t, 2, removeBindings())
	got, err := h.sys.GetInstance("owner-1")
	require.NoError(t, err)
	waiting := `the deprovision waits for its users to go: SFServiceBinding b-1, SFServiceBinding b-2 (annotate quartermaster.io/deprovision-in-use=true to have it delete the instance's bindings first)`
	assert.Equal(t, waiting, got.Status.Description)
	cond := meta.FindStatusCondition(got.Status.Conditions, osbv1alpha1.ConditionInUse)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, waiting, cond.Message)
	var untouched osbv1alpha1.SFServiceBindingList
	require.NoError(t, h.sys.Kube.Client.List(ctx, &untouched, ctrlclient.InNamespace(h.sys.Namespace)))
	for _, b := range untouched.Items {
		assert.Nil(t, b.DeletionTimestamp, "binding %s is left to its user", b.Name)
	}

	// The delete says otherwise: the bindings go first.
	base := got.DeepCopy()
	metav1.SetMetaDataAnnotation(&got.ObjectMeta, osbv1alpha1.DeprovisionInUseAnnotation, "true")
	require.NoError(t, h.sys.Kube.Client.Patch(ctx, got, ctrlclient.MergeFrom(base)))
	assert.Equal(t, 2, removeBindings())
	got, err = h.sys.GetInstance("owner-1")
	require.NoError(t, err)
	assert.Equal(t, "waiting for 2 bindings to be unbound", got.Status.Description)
	var list osbv1alpha1.SFServiceBindingList
	require.NoError(t, h.sys.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(h.sys.Namespace)))
	for _, b := range list.Items {
		assert.Equal(t, b.Spec.InstanceID == "owner-1", b.DeletionTimestamp != nil, "binding %s is deleted only if it is the instance's", b.Name)
	}

	// Their Unbind runs end: the finalizers go, and so do the bindings.
	for _, b := range list.Items {
		if b.Spec.InstanceID != "owner-1" {
			continue
		}
		base := b.DeepCopy()
		b.Finalizers = nil
		require.NoError(t, h.sys.Kube.Client.Patch(ctx, &b, ctrlclient.MergeFrom(base)))
	}
	assert.Equal(t, 0, removeBindings())
	got, err = h.sys.GetInstance("owner-1")
	require.NoError(t, err)
	assert.Equal(t, "deprovision in progress", got.Status.Description)
	_, err = h.sys.GetInstance(other.Name)
	require.NoError(t, err)
}
