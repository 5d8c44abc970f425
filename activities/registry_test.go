package activities_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestAStaleApplyAfterTheRemovalWritesNothing is a worker stopped between
// the first steps of a provision: it loaded the instance, and goes on with
// it after another worker provisioned it and it was deprovisioned and is
// gone. Its apply creates no registry, and so neither a password nor any
// object.
func TestAStaleApplyAfterTheRemovalWritesNothing(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	inst := h.sys.Instance("stale-1", h.plan("pw", passwordPlan), "")
	target := lifecycle.InstanceTarget(inst)

	stale := h.worker()
	_, err := h.runOn(stale, "Begin", target, lifecycle.OpProvision)
	require.NoError(t, err)
	h.remove(inst)

	_, err = h.runOn(stale, "ApplyTemplates", target, lifecycle.OpProvision)
	appErr := applicationError(t, err)
	assert.Equal(t, activities.ErrGone, appErr.Type(), "%v", err)
	for name, obj := range map[string]ctrlclient.Object{"qm-instance-stale-1": &corev1.Secret{}, "stale-1-db": &corev1.ConfigMap{}} {
		err := h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: name}, obj)
		assert.True(t, apierrors.IsNotFound(err), "%T %s is not written: %v", obj, name, err)
	}
}

// remove deletes an instance and takes its finalizer off, as a removal
// that ended does: it is gone.
func (h *harness) remove(inst *osbv1alpha1.SFServiceInstance) {
	h.t.Helper()
	ctx := context.Background()
	require.NoError(h.t, h.sys.Kube.Client.Delete(ctx, inst))
	release := ctrlclient.RawPatch(types.MergePatchType, []byte(`{"metadata": {"finalizers": null}}`))
	require.NoError(h.t, h.sys.Kube.Client.Patch(ctx, inst, release))
	_, err := h.sys.GetInstance(inst.Name)
	require.True(h.t, apierrors.IsNotFound(err), "instance %s is gone: %v", inst.Name, err)
}

// TestARegistryGoesWithItsResource: the instance owns its registry, which
// owns what the instance applied, so that an instance that goes without
// its deprovision (a user took its finalizer off) leaves nothing behind.
func TestARegistryGoesWithItsResource(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	inst := h.sys.Instance("owned-1", h.plan("pw", passwordPlan), "")
	_, err := h.run("ApplyTemplates", lifecycle.InstanceTarget(inst), lifecycle.OpProvision)
	require.NoError(t, err)
	var reg corev1.Secret
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-owned-1"}, &reg))
	require.Len(t, reg.OwnerReferences, 1)
	assert.Equal(t, inst.UID, reg.OwnerReferences[0].UID, "the instance owns its registry")
	assert.Equal(t, "SFServiceInstance", reg.OwnerReferences[0].Kind)

	h.remove(inst)
	assert.Eventually(t, func() bool {
		errReg := h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&reg), &corev1.Secret{})
		errCM := h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "owned-1-db"}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(errReg) && apierrors.IsNotFound(errCM)
	}, 30*time.Second, 50*time.Millisecond, "the garbage collector removes the registry and the ConfigMap")
}

// TestARegistryOfAnEarlierResourceIsReplaced: a registry left by an
// instance of the same name that is gone (here on an API server with no
// garbage collector, which would remove it in time) is not used by the new
// instance: it would take the earlier password, and lose its registry when
// the collector caught up.
func TestARegistryOfAnEarlierResourceIsReplaced(t *testing.T) {
	h := newHarnessOn(t, testenv.Parts{Bare: true})
	ctx := context.Background()
	planID := h.plan("pw", passwordPlan)
	registryOf := func(inst *osbv1alpha1.SFServiceInstance) corev1.Secret {
		t.Helper()
		_, err := h.run("ApplyTemplates", lifecycle.InstanceTarget(inst), lifecycle.OpProvision)
		require.NoError(t, err)
		var reg corev1.Secret
		require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-again-1"}, &reg))
		return reg
	}
	earlier := h.sys.Instance("again-1", planID, "")
	earlierReg := registryOf(earlier)
	h.remove(earlier)

	inst := h.sys.Instance("again-1", planID, "")
	reg := registryOf(inst)
	assert.NotEqual(t, earlierReg.UID, reg.UID, "the earlier registry is replaced")
	require.Len(t, reg.OwnerReferences, 1)
	assert.Equal(t, inst.UID, reg.OwnerReferences[0].UID, "the new instance owns the new registry")
	var cm corev1.ConfigMap
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "again-1-db"}, &cm))
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, reg.UID, cm.OwnerReferences[0].UID, "the new registry owns the ConfigMap")
	assert.Equal(t, h.sys.RegistryValue("qm-instance-again-1", "password"), cm.Data["password"])
	assert.NotEqual(t, string(earlierReg.Data["password"]), string(reg.Data["password"]), "the password is the new instance's own")
}

// TestAnObservationWritesNoRegistry: the removal of an instance that never
// applied anything (its provision was refused before) is observed with the
// plan's status template, which reads the registry. There is none, and the
// observation creates none: it writes only what it decided to. A bind's
// observation does create its registry, to keep the credentials in.
func TestAnObservationWritesNoRegistry(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	planID := h.plan("pw", passwordPlan)
	inst := h.sys.Instance("never-1", planID, "")
	inst.Finalizers = []string{"test.quartermaster.io/hold"}
	require.NoError(t, h.sys.Kube.Client.Update(ctx, inst))
	require.NoError(t, h.sys.Kube.Client.Delete(ctx, inst))
	t.Cleanup(func() { h.remove(inst) })

	val, err := h.run("Observe", lifecycle.InstanceTarget(inst), lifecycle.OpDeprovision)
	require.NoError(t, err)
	var outcome activities.Outcome
	require.NoError(t, val.Get(&outcome))
	assert.Equal(t, activities.Outcome{State: osbv1alpha1.StateSucceeded}, outcome, "nothing was applied, so nothing is left to wait for")
	err = h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-never-1"}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "the observation created no registry: %v", err)

	provisioned := h.sys.Instance("db-1", planID, "")
	_, err = h.run("ApplyTemplates", lifecycle.InstanceTarget(provisioned), lifecycle.OpProvision)
	require.NoError(t, err)
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: h.sys.Namespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: "app-1", InstanceID: "db-1", ServiceID: h.sys.ServiceID, PlanID: planID},
	}
	require.NoError(t, h.sys.Kube.Client.Create(ctx, b))
	_, err = h.run("Observe", lifecycle.BindingTarget(b), lifecycle.OpBind)
	require.NoError(t, err)
	var reg corev1.Secret
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-binding-app-1"}, &reg), "the bind stored its credentials in a registry it created")
	require.Len(t, reg.OwnerReferences, 1)
	assert.Equal(t, b.UID, reg.OwnerReferences[0].UID, "the binding owns it")
	creds, ok := h.sys.RegistryValue("qm-binding-app-1", "credentials").(map[string]any)
	require.True(t, ok, "the binding's registry holds its credentials")
	assert.Equal(t, h.sys.RegistryValue("qm-instance-db-1", "password"), creds["password"], "the credentials the status template rendered from the instance's registry")
}

// registryRequests counts the requests a client makes for the registry
// Secret name, by verb.
func registryRequests(t *testing.T, h *harness, name string) (ctrlclient.Client, map[string]int) {
	t.Helper()
	direct, err := ctrlclient.NewWithWatch(h.sys.Kube.Config, ctrlclient.Options{Scheme: h.ops.Client.Scheme()})
	require.NoError(t, err)
	counts := map[string]int{}
	var mu sync.Mutex
	count := func(verb string, key ctrlclient.ObjectKey) {
		if key.Name == name {
			mu.Lock()
			counts[verb]++
			mu.Unlock()
		}
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c ctrlclient.WithWatch, key ctrlclient.ObjectKey, obj ctrlclient.Object, opts ...ctrlclient.GetOption) error {
			count("get", key)
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c ctrlclient.WithWatch, obj ctrlclient.Object, opts ...ctrlclient.CreateOption) error {
			count("create", ctrlclient.ObjectKeyFromObject(obj))
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c ctrlclient.WithWatch, obj ctrlclient.Object, opts ...ctrlclient.UpdateOption) error {
			count("update", ctrlclient.ObjectKeyFromObject(obj))
			return c.Update(ctx, obj, opts...)
		},
	}), counts
}

// TestARegistryIsWrittenOnceAndReadByTheNextStep: a provision's first
// apply creates the registry with the password its render generated (one
// write, not a create and then an update), and the observation that
// follows in the same run uses it as written, without reading it; a later
// poll reads it again. A retry whose registry an earlier attempt created
// renders the same password from it.
func TestARegistryIsWrittenOnceAndReadByTheNextStep(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	inst := h.sys.Instance("once-1", h.plan("pw", passwordPlan), "")
	target := lifecycle.InstanceTarget(inst)
	counted, counts := registryRequests(t, h, "qm-instance-once-1")
	ops := h.worker()
	ops.Client = counted

	_, err := h.runOn(ops, "ApplyTemplates", target, lifecycle.OpProvision)
	require.NoError(t, err)
	password := h.sys.RegistryValue("qm-instance-once-1", "password")
	assert.Len(t, password, 12)
	assert.Equal(t, map[string]int{"create": 1}, counts, "the registry is created with the render's values, and nothing more")

	h.sys.Create("{apiVersion: v1, kind: ConfigMap, metadata: {name: once-1-gate, namespace: " + h.sys.Namespace + "}}")
	for _, reads := range []int{0, 1} {
		_, err = h.runOn(ops, "Observe", target, lifecycle.OpProvision)
		require.NoError(t, err)
		assert.Equal(t, reads, counts["get"], "the observation after the apply reads no registry; the next one does")
	}

	// Another worker's attempt, after this one's was lost: the registry
	// exists, and its password is rendered again.
	retry := h.worker()
	retry.Client = counted
	_, err = h.runOn(retry, "ApplyTemplates", target, lifecycle.OpProvision)
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "once-1-db"}, &cm))
	assert.Equal(t, password, cm.Data["password"], "the retry renders the stored password")
	assert.Equal(t, 2, counts["create"], "the retry tried to create the registry, found it, and read it")
	assert.Zero(t, counts["update"], "nothing changed in it")
}
