package apply_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func owner(t *testing.T, c client.Client, ns, name string) apply.Owner {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	require.NoError(t, c.Create(context.Background(), s))
	return apply.Owner{Name: s.Name, Namespace: ns, UID: s.UID}
}

func objects(t *testing.T, doc string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := plan.Objects(doc)
	require.NoError(t, err)
	return objs
}

func TestApplyOwnsWhatItCanAndListsTheRest(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns, other := kube.Namespace(t), kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry-a")

	doc := `
apiVersion: v1
kind: ConfigMap
metadata: {name: config}
data: {size: small}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: elsewhere, namespace: ` + other + `}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ` + ns + `-reader}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
`
	refs, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, doc))
	require.NoError(t, err)
	assert.Equal(t, []apply.Ref{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "config", Namespace: ns},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "elsewhere", Namespace: other},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: ns + "-reader"},
	}, refs)

	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, reg.UID, cm.OwnerReferences[0].UID)
	assert.Equal(t, "Secret", cm.OwnerReferences[0].Kind)
	assert.Equal(t, "small", cm.Data["size"])
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: other, Name: "elsewhere"}, &cm))
	assert.Empty(t, cm.OwnerReferences, "an owner reference cannot cross namespaces")
	var role rbacv1.ClusterRole
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Name: ns + "-reader"}, &role))
	assert.Empty(t, role.OwnerReferences, "a cluster-scoped object cannot be owned by a namespaced one")

	// Applying again changes nothing and fails nothing.
	rv := cm.ResourceVersion
	_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, doc))
	require.NoError(t, err)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: other, Name: "elsewhere"}, &cm))
	assert.Equal(t, rv, cm.ResourceVersion, "an unchanged apply is a no-op")

	// An update that renders less prunes what it no longer renders.
	refs2, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 2}, ns, objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {size: large}\n"))
	require.NoError(t, err)
	left, err := apply.Prune(ctx, kube.Client, reg, apply.Fence{Generation: 2}, refs, refs2)
	require.NoError(t, err)
	assert.Empty(t, left)
	assertGone(t, kube, client.ObjectKey{Namespace: other, Name: "elsewhere"}, &cm)
	assertGone(t, kube, client.ObjectKey{Name: ns + "-reader"}, &role)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "large", cm.Data["size"])

	left, err = apply.Delete(ctx, kube.Client, reg, refs2)
	require.NoError(t, err)
	assert.Empty(t, left)
	assertGone(t, kube, client.ObjectKey{Namespace: ns, Name: "config"}, &cm)
	_, err = apply.Delete(ctx, kube.Client, reg, refs2)
	require.NoError(t, err, "deleting twice is fine")
}

func TestSingletonLivesUntilItsLastOwnerGoes(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	a, b := owner(t, kube.Client, ns, "registry-a"), owner(t, kube.Client, ns, "registry-b")
	doc := func(value string) []*unstructured.Unstructured {
		return objects(t, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: shared
  annotations: {quartermaster.io/singleton: "true"}
data: {value: `+value+`}
`)
	}

	refsA, err := apply.Objects(ctx, kube.Client, a, apply.Fence{Generation: 1}, ns, doc("first"))
	require.NoError(t, err)
	refsB, err := apply.Objects(ctx, kube.Client, b, apply.Fence{Generation: 1}, ns, doc("second"))
	require.NoError(t, err)
	_, err = apply.Objects(ctx, kube.Client, b, apply.Fence{Generation: 1}, ns, doc("second"))
	require.NoError(t, err, "adding the same owner twice is a no-op")

	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, &cm))
	assert.Equal(t, "first", cm.Data["value"], "an existing singleton is not rewritten")
	require.Len(t, cm.OwnerReferences, 2)

	_, err = apply.Delete(ctx, kube.Client, a, refsA)
	require.NoError(t, err)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, &cm))
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, b.UID, cm.OwnerReferences[0].UID)

	_, err = apply.Delete(ctx, kube.Client, b, refsB)
	require.NoError(t, err)
	assertGone(t, kube, client.ObjectKey{Namespace: ns, Name: "shared"}, &cm)
}

func TestApplyErrorNamesTheObject(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry-a")
	_, err := apply.Objects(context.Background(), kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: Not_A_Valid_Name}
`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "applying ConfigMap "+ns+"/Not_A_Valid_Name")
	assert.True(t, apierrors.IsInvalid(err), "the API server's verdict is kept for the caller: %v", err)

	_, err = apply.Objects(context.Background(), kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Widget w")
}

// assertGone waits until the object is deleted: deletion is in the
// foreground, so the garbage collector removes it a moment after Delete.
func assertGone(t *testing.T, kube *testenv.Cluster, key client.ObjectKey, obj client.Object) {
	t.Helper()
	assert.Eventually(t, func() bool {
		return apierrors.IsNotFound(kube.Client.Get(context.Background(), key, obj))
	}, 30*time.Second, 20*time.Millisecond, "%T %s is deleted", obj, key)
}

// configMap renders one ConfigMap named config whose size is size.
func configMap(t *testing.T, size string) []*unstructured.Unstructured {
	return objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {size: "+size+"}\n")
}

func TestAStaleApplyWritesNothing(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	gen3 := apply.Fence{Generation: 3, PlanGeneration: 1}
	_, err := apply.Objects(ctx, kube.Client, reg, gen3, ns, configMap(t, "gen-3"))
	require.NoError(t, err)

	_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 2, PlanGeneration: 1}, ns, configMap(t, "gen-2"))
	var superseded *apply.Superseded
	require.ErrorAs(t, err, &superseded)
	assert.Contains(t, err.Error(), "ConfigMap "+ns+"/config holds generation 3 (plan generation 1), newer than the 2 (plan generation 1)")
	_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 3, PlanGeneration: 0}, ns, configMap(t, "old-plan"))
	require.ErrorAs(t, err, &superseded, "the same generation from an older plan is stale too")
	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "gen-3", cm.Data["size"], "the newer generation's object is left as it was")
	assert.Equal(t, string(reg.UID)+"/3/1", cm.Annotations[apply.RenderedAnnotation])

	// A stale update's prune does not delete what the newer one applied.
	refs := []apply.Ref{{APIVersion: "v1", Kind: "ConfigMap", Name: "config", Namespace: ns}}
	_, err = apply.Prune(ctx, kube.Client, reg, apply.Fence{Generation: 2}, refs, nil)
	require.ErrorAs(t, err, &superseded)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm), "the object is still there")

	// A newer generation writes.
	_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 4, PlanGeneration: 1}, ns, configMap(t, "gen-4"))
	require.NoError(t, err)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "gen-4", cm.Data["size"])
}

// TestNoApplyTakesOverAnotherOwnersObject: an object of the name a plan
// renders that another instance's applies made, or a user, is neither
// written over nor deleted: the apply fails with NotOurs, and a removal
// whose refs list it leaves it and says so. An instance made again under
// the same name applies once the old one's object is gone.
func TestNoApplyTakesOverAnotherOwnersObject(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	first := owner(t, kube.Client, ns, "registry-first")
	_, err := apply.Objects(ctx, kube.Client, first, apply.Fence{Generation: 1}, ns, configMap(t, "first"))
	require.NoError(t, err)
	users := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "users", Namespace: ns}, Data: map[string]string{"size": "user's"}}
	require.NoError(t, kube.Client.Create(ctx, users))

	again := owner(t, kube.Client, ns, "registry-again")
	_, err = apply.Objects(ctx, kube.Client, again, apply.Fence{Generation: 1}, ns, configMap(t, "again"))
	var notOurs *apply.NotOurs
	require.ErrorAs(t, err, &notOurs)
	assert.Contains(t, err.Error(), "ConfigMap "+ns+"/config already exists and was not made by Quartermaster for this instance or binding")
	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "first", cm.Data["size"], "the other owner's object is as it was")

	usersDoc := objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: users}\ndata: {size: mine}\n")
	_, err = apply.Objects(ctx, kube.Client, again, apply.Fence{Generation: 1}, ns, usersDoc)
	require.ErrorAs(t, err, &notOurs, "a user's object is not taken over either")

	refs := []apply.Ref{{APIVersion: "v1", Kind: "ConfigMap", Name: "config", Namespace: ns}, {APIVersion: "v1", Kind: "ConfigMap", Name: "users", Namespace: ns}}
	left, err := apply.Delete(ctx, kube.Client, again, refs)
	require.NoError(t, err)
	assert.Equal(t, refs, left, "a removal leaves, and returns, what is not its owner's")
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "users"}, &cm))
	assert.Equal(t, "user's", cm.Data["size"])

	left, err = apply.Delete(ctx, kube.Client, first, refs[:1])
	require.NoError(t, err)
	assert.Empty(t, left)
	assertGone(t, kube, client.ObjectKey{Namespace: ns, Name: "config"}, &cm)
	_, err = apply.Objects(ctx, kube.Client, again, apply.Fence{Generation: 1}, ns, configMap(t, "again"))
	require.NoError(t, err, "once the old object is gone, the new owner applies")
}

// TestANewerWriteBetweenReadAndWriteWins shows the API server's part of the
// fence: a newer generation lands after the stale apply read the object and
// before it writes. The stale write's precondition fails, it reads again,
// and stops.
func TestANewerWriteBetweenReadAndWriteWins(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	_, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, configMap(t, "gen-1"))
	require.NoError(t, err)

	direct, err := client.NewWithWatch(kube.Config, client.Options{})
	require.NoError(t, err)
	// Built here: the interceptor runs on the apply's goroutines, where
	// nothing may stop the test.
	newer := configMap(t, "gen-3")
	overtaken := false
	racing := interceptor.NewClient(direct, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if !overtaken {
				overtaken = true // the newer worker writes in between
				if _, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 3}, ns, newer); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	_, err = apply.Objects(ctx, racing, reg, apply.Fence{Generation: 2}, ns, configMap(t, "gen-2"))
	var superseded *apply.Superseded
	require.ErrorAs(t, err, &superseded, "the stale write failed its precondition, read again and stopped")
	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "gen-3", cm.Data["size"])
}

// TestApplyKeepsWhatAdmissionReadsInOrder: objects go to the API server
// several at once, but a namespace exists before what goes in it, and a
// pod's service account and limit range before the pod, which the API
// server's admission refuses without its service account and defaults
// from the limit range. Each object is there, owned as before; a failure
// is the first in the template's order, with the refs of what comes
// before it, and nothing after its wave is applied.
func TestApplyKeepsWhatAdmissionReadsInOrder(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	inner := ns + "-inner"
	t.Cleanup(func() {
		_ = kube.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inner}})
	})
	doc := `
apiVersion: v1
kind: Namespace
metadata: {name: ` + inner + `}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ` + inner + `}
data: {a: "1"}
---
apiVersion: v1
kind: Secret
metadata: {name: login, namespace: ` + inner + `}
stringData: {password: p}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults}
spec: {limits: [{type: Container, default: {memory: 64Mi}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  serviceAccountName: app
  automountServiceAccountToken: false
  containers: [{name: app, image: example.com/app}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config}
data: {size: small}
`
	// Every write is watched as it starts: an ordered object's must come
	// after the write of everything before it in the template, and
	// everything after it must wait for its write to end.
	objs := objects(t, doc)
	key := func(o client.Object) string { return o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetName() }
	ordered := map[string]bool{"Namespace": true, "ServiceAccount": true, "LimitRange": true}
	mustFollow := map[string][]string{}
	for i, later := range objs {
		for _, earlier := range objs[:i] {
			if ordered[later.GetKind()] || ordered[earlier.GetKind()] {
				mustFollow[key(later)] = append(mustFollow[key(later)], key(earlier))
			}
		}
	}
	var mu sync.Mutex
	written := map[string]bool{}
	var tooEarly []string
	watching, err := client.NewWithWatch(kube.Config, client.Options{Scheme: kube.Client.Scheme()})
	require.NoError(t, err)
	watched := interceptor.NewClient(watching, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			mu.Lock()
			for _, earlier := range mustFollow[key(obj)] {
				if !written[earlier] {
					tooEarly = append(tooEarly, key(obj)+" before "+earlier)
				}
			}
			mu.Unlock()
			err := c.Patch(ctx, obj, patch, opts...)
			mu.Lock()
			written[key(obj)] = true
			mu.Unlock()
			return err
		},
	})
	refs, err := apply.Objects(ctx, watched, reg, apply.Fence{Generation: 1}, ns, objs)
	require.NoError(t, err)
	mu.Lock()
	assert.Empty(t, tooEarly, "written before what they must follow")
	mu.Unlock()
	names := make([]string, len(refs))
	for i, ref := range refs {
		names[i] = ref.Kind + " " + ref.Namespace + "/" + ref.Name
	}
	assert.Equal(t, []string{"Namespace /" + inner, "ConfigMap " + inner + "/settings", "Secret " + inner + "/login",
		"ServiceAccount " + ns + "/app", "LimitRange " + ns + "/defaults", "Pod " + ns + "/app", "ConfigMap " + ns + "/config"}, names,
		"the refs in the template's order")
	var pod corev1.Pod
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &pod))
	assert.Equal(t, "64Mi", pod.Spec.Containers[0].Resources.Limits.Memory().String(), "the limit range was there when the pod was admitted")
	require.Len(t, pod.OwnerReferences, 1)
	assert.Equal(t, reg.UID, pod.OwnerReferences[0].UID)
	var secret corev1.Secret
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: inner, Name: "login"}, &secret))
	assert.Equal(t, "p", string(secret.Data["password"]))

	// Two objects of one wave fail, and one of them comes first.
	bad := `
apiVersion: v1
kind: ConfigMap
metadata: {name: fine}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: First_Bad}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: Second_Bad}
---
apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `-never}
`
	refs, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, bad))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ConfigMap "+ns+"/First_Bad")
	assert.Equal(t, []apply.Ref{{APIVersion: "v1", Kind: "ConfigMap", Name: "fine", Namespace: ns}}, refs)
	err = kube.Client.Get(ctx, client.ObjectKey{Name: ns + "-never"}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing after a failed wave is applied: %v", err)
}

// TestACustomResourceAfterItsDefinition: a template that renders a CRD and
// then an object of it applies the definition first, though the object's
// kind cannot be looked up before; the step's retry applies the object
// once the definition is established.
func TestACustomResourceAfterItsDefinition(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	group := ns + ".example.com"
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "gadgets." + group
	t.Cleanup(func() { _ = kube.Client.Delete(context.Background(), crd) })
	doc := `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.` + group + `}
spec:
  group: ` + group + `
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: ` + group + `/v1
kind: Gadget
metadata: {name: g}
spec: {size: 3}
`
	_, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, objects(t, doc))
	if err != nil {
		assert.Contains(t, err.Error(), "Gadget g", "only the custom resource can fail, its kind not known yet")
	}
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd), "the definition is applied either way")
	require.Eventually(t, func() bool {
		objs, err := plan.Objects(doc)
		if err != nil {
			return false
		}
		_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns, objs)
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "a retry applies the custom resource")
	gadget := &unstructured.Unstructured{}
	gadget.SetAPIVersion(group + "/v1")
	gadget.SetKind("Gadget")
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "g"}, gadget))
	size, _, _ := unstructured.NestedInt64(gadget.Object, "spec", "size")
	assert.Equal(t, int64(3), size)
}
