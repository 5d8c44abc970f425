package apply_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/testenv"
)

// requestCounter counts a client's requests by verb.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *requestCounter) add(verb string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[verb]++
}

func (r *requestCounter) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts
	r.counts = map[string]int{}
	return c
}

func countingClient(t *testing.T, kube *testenv.Cluster) (client.Client, *requestCounter) {
	t.Helper()
	direct, err := client.NewWithWatch(kube.Config, client.Options{})
	require.NoError(t, err)
	r := &requestCounter{counts: map[string]int{}}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			r.add("get")
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			r.add("create")
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			r.add("patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
	}), r
}

// TestApplyCreatesWhatItNeverWroteWithoutReadingIt: with Existing, an
// object no earlier apply wrote is created in one request, stamped and
// owned as an applied one. Applied again, it is read and applied; what
// the template no longer renders goes from it, as from any applied
// object, and the field manager holds it as an apply. An object that
// exists after all is read and fenced: a user's is not taken over, and a
// newer generation's is not written over.
func TestApplyCreatesWhatItNeverWroteWithoutReadingIt(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	c, requests := countingClient(t, kube)

	two := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, labels: {tier: small}}\ndata: {size: small, extra: yes}\n" +
		"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: b}\n"
	refs, err := apply.Objects(ctx, c, reg, apply.Fence{Generation: 1}, ns, objects(t, two), apply.Existing(nil))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"create": 2}, requests.take(), "a create each, and no read")
	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "small", cm.Data["size"])
	assert.Equal(t, string(reg.UID)+"/1/0", cm.Annotations[apply.RenderedAnnotation])
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, reg.UID, cm.OwnerReferences[0].UID)

	// Applied again, one key and the label fewer: they go.
	one := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {size: large}\n"
	_, err = apply.Objects(ctx, c, reg, apply.Fence{Generation: 2}, ns, objects(t, one), apply.Existing(refs))
	require.NoError(t, err)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, map[string]string{"size": "large"}, cm.Data, "what the template no longer renders is gone")
	assert.NotContains(t, cm.Labels, "tier")
	assert.Equal(t, string(reg.UID)+"/2/0", cm.Annotations[apply.RenderedAnnotation])
	var managers []string
	for _, m := range cm.ManagedFields {
		managers = append(managers, m.Manager+" "+string(m.Operation))
	}
	assert.Equal(t, []string{apply.FieldManager + " Apply"}, managers, "the create's fields were handed to the apply")
	assert.Equal(t, map[string]int{"get": 1, "patch": 2}, requests.take(), "a read, the hand-over and the apply")

	// Listed as existing, and applied again: read and applied, no hand-over.
	_, err = apply.Objects(ctx, c, reg, apply.Fence{Generation: 3}, ns, objects(t, one), apply.Existing(refs))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"get": 1, "patch": 1}, requests.take())

	// Not listed, but there after all (an earlier attempt's): the create
	// fails, and the object is read and applied.
	_, err = apply.Objects(ctx, c, reg, apply.Fence{Generation: 4}, ns, objects(t, one), apply.Existing(nil))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"create": 1, "get": 1, "patch": 1}, requests.take())

	// Not listed, a newer generation's: not written over.
	_, err = apply.Objects(ctx, c, reg, apply.Fence{Generation: 3}, ns, configMap(t, "stale"), apply.Existing(nil))
	var superseded *apply.Superseded
	require.ErrorAs(t, err, &superseded)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "large", cm.Data["size"])

	// Not listed, a user's: not taken over.
	users := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "users", Namespace: ns}, Data: map[string]string{"size": "user's"}}
	require.NoError(t, kube.Client.Create(ctx, users))
	_, err = apply.Objects(ctx, c, reg, apply.Fence{Generation: 5}, ns,
		objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: users}\ndata: {size: mine}\n"), apply.Existing(nil))
	var notOurs *apply.NotOurs
	require.ErrorAs(t, err, &notOurs)
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "users"}, &cm))
	assert.Equal(t, map[string]string{"size": "user's"}, cm.Data)
	assert.NotContains(t, cm.Annotations, apply.RenderedAnnotation)
}

// TestACreateLandsOnlyWhereNothingIs: the window a read leaves is closed
// for an object created without one. A newer generation creates the
// object just before a stale apply's create: the stale create fails, the
// apply reads the newer stamp and writes nothing. A check that says no
// creates nothing either.
func TestACreateLandsOnlyWhereNothingIs(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ctx := context.Background()
	ns := kube.Namespace(t)
	reg := owner(t, kube.Client, ns, "registry")
	direct, err := client.NewWithWatch(kube.Config, client.Options{})
	require.NoError(t, err)
	// Built here: the interceptor runs on the apply's goroutines, where
	// nothing may stop the test.
	newer := configMap(t, "gen-3")
	overtaken := false
	racing := interceptor.NewClient(direct, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if !overtaken {
				overtaken = true // the newer worker creates it in between
				if _, err := apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 3}, ns, newer, apply.Existing(nil)); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	_, err = apply.Objects(ctx, racing, reg, apply.Fence{Generation: 2}, ns, configMap(t, "gen-2"), apply.Existing(nil))
	var superseded *apply.Superseded
	require.ErrorAs(t, err, &superseded, "the stale create failed, and the read found the newer stamp")
	var cm corev1.ConfigMap
	require.NoError(t, kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "config"}, &cm))
	assert.Equal(t, "gen-3", cm.Data["size"])

	gone := errors.New("the instance is gone")
	_, err = apply.Objects(ctx, kube.Client, reg, apply.Fence{Generation: 1}, ns,
		objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: never}\n"), apply.Existing(nil), apply.After(func() error { return gone }))
	require.ErrorIs(t, err, gone)
	err = kube.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "never"}, &cm)
	assert.True(t, apierrors.IsNotFound(err), "nothing created: %v", err)
}
