package drift

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

func TestOf(t *testing.T) {
	plan := func(d *osbv1alpha1.DriftSettings) *osbv1alpha1.SFPlan {
		return &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Drift: d}}
	}
	cases := []struct {
		name    string
		plan    *osbv1alpha1.SFPlan
		tenants bool
		want    Settings
		ok      bool
	}{
		{name: "no plan", plan: nil},
		{name: "not asked for", plan: plan(nil)},
		{name: "defaults", plan: plan(&osbv1alpha1.DriftSettings{}), want: Settings{Every: DefaultEvery, Action: osbv1alpha1.DriftReport}, ok: true},
		{name: "set", plan: plan(&osbv1alpha1.DriftSettings{Every: &metav1.Duration{Duration: time.Minute}, Action: osbv1alpha1.DriftRepair}),
			want: Settings{Every: time.Minute, Action: osbv1alpha1.DriftRepair}, ok: true},
		{name: "too short", plan: plan(&osbv1alpha1.DriftSettings{Every: &metav1.Duration{Duration: time.Millisecond}}),
			want: Settings{Every: MinEvery, Action: osbv1alpha1.DriftReport}, ok: true},
		{name: "a tenant's plan, at most once a minute", tenants: true, plan: plan(&osbv1alpha1.DriftSettings{Every: &metav1.Duration{Duration: 2 * time.Second}}),
			want: Settings{Every: TenantMinEvery, Action: osbv1alpha1.DriftReport}, ok: true},
		{name: "a tenant's plan, slower", tenants: true, plan: plan(&osbv1alpha1.DriftSettings{Every: &metav1.Duration{Duration: time.Hour}}),
			want: Settings{Every: time.Hour, Action: osbv1alpha1.DriftReport}, ok: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Of(c.plan, !c.tenants)
			assert.Equal(t, c.ok, ok)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestAtRest(t *testing.T) {
	meta := func(gen int64, deleting bool) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Generation: gen}
		if deleting {
			m.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return m
	}
	inst := func(state osbv1alpha1.OperationState, gen, observed int64, deleting bool) client.Object {
		i := &osbv1alpha1.SFServiceInstance{ObjectMeta: meta(gen, deleting)}
		i.Status.State, i.Status.ObservedGeneration = state, observed
		return i
	}
	binding := func(state osbv1alpha1.OperationState, gen, observed int64, deleting bool) client.Object {
		b := &osbv1alpha1.SFServiceBinding{ObjectMeta: meta(gen, deleting)}
		b.Status.State, b.Status.ObservedGeneration = state, observed
		return b
	}
	for kind, of := range map[string]func(osbv1alpha1.OperationState, int64, int64, bool) client.Object{"instance": inst, "binding": binding} {
		for _, c := range []struct {
			name             string
			state            osbv1alpha1.OperationState
			gen, observed    int64
			deleting, atRest bool
		}{
			{"succeeded", osbv1alpha1.StateSucceeded, 2, 2, false, true},
			{"an update is asked for", osbv1alpha1.StateSucceeded, 3, 2, false, false},
			{"an operation runs", osbv1alpha1.StateInProgress, 2, 2, false, false},
			{"the last operation failed", osbv1alpha1.StateFailed, 2, 2, false, false},
			{"being deleted", osbv1alpha1.StateSucceeded, 2, 2, true, false},
		} {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				assert.Equal(t, c.atRest, AtRest(of(c.state, c.gen, c.observed, c.deleting)))
			})
		}
	}
	assert.False(t, AtRest(&corev1.Secret{}), "only instances and bindings are checked")
}

func TestSecretName(t *testing.T) {
	assert.Equal(t, "qm-applied-db", SecretName(lifecycle.KindInstance, "db"))
	assert.Equal(t, "qm-bind-applied-db", SecretName(lifecycle.KindBinding, "db"), "a binding named as an instance has a record of its own")
	assert.NotEqual(t, SecretName(lifecycle.KindInstance, "bind-applied-x"), SecretName(lifecycle.KindBinding, "x"))
}

func TestRecord(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "apiVersion": "v1",
		"metadata": map[string]any{"name": "c", "resourceVersion": "5", "uid": "u", "managedFields": []any{}}, "data": map[string]any{"a": "b"}}}
	r := NewRecord(3, 7, []*unstructured.Unstructured{live})
	assert.Equal(t, "5", live.GetResourceVersion(), "the objects are copied")
	data, err := r.Encode()
	require.NoError(t, err)
	back, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"a": "b"}}, back.Objects[0].Object)
	assert.True(t, back.Current(3, 7))
	assert.False(t, back.Current(3, 8), "rendered from an older plan")
	assert.False(t, back.Current(4, 7), "of an older spec")
	_, err = Decode(map[string][]byte{"other": nil})
	assert.Error(t, err)
}

func TestDue(t *testing.T) {
	s := Settings{Every: time.Minute}
	start := time.Unix(1_000_000, 0)
	checks := 0
	for i := range 600 {
		from := start.Add(time.Duration(i) * time.Second)
		if Due("uid-1", s, from, from.Add(time.Second)) {
			checks++
		}
	}
	assert.Equal(t, 10, checks, "once a period, over ten periods")
}
