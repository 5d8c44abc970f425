package drift

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
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
	inst := func(state osbv1alpha1.OperationState, gen, observed int64, deleting bool) *osbv1alpha1.SFServiceInstance {
		i := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Generation: gen}}
		i.Status.State, i.Status.ObservedGeneration = state, observed
		if deleting {
			i.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return i
	}
	assert.True(t, AtRest(inst(osbv1alpha1.StateSucceeded, 2, 2, false)))
	assert.False(t, AtRest(inst(osbv1alpha1.StateSucceeded, 3, 2, false)), "an update is asked for")
	assert.False(t, AtRest(inst(osbv1alpha1.StateInProgress, 2, 2, false)), "an operation runs")
	assert.False(t, AtRest(inst(osbv1alpha1.StateFailed, 2, 2, false)), "the last operation failed")
	assert.False(t, AtRest(inst(osbv1alpha1.StateSucceeded, 2, 2, true)), "being deleted")
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
