package rotation_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/rotation"
)

func TestCheck(t *testing.T) {
	plan := func(rotatable *bool) *osbv1alpha1.SFPlan {
		return &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Name: "small", BindingRotatable: rotatable}}
	}
	binding := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "b-2"},
		Spec: osbv1alpha1.SFServiceBindingSpec{ID: "b-2", InstanceID: "db", PredecessorBinding: "b-1"}}
	bound := func(edit func(*osbv1alpha1.SFServiceBinding)) *osbv1alpha1.SFServiceBinding {
		b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "b-1"},
			Spec:   osbv1alpha1.SFServiceBindingSpec{ID: "b-1", InstanceID: "db"},
			Status: osbv1alpha1.SFServiceBindingStatus{State: osbv1alpha1.StateSucceeded, AppliedSpec: &osbv1alpha1.SFServiceBindingSpec{}}}
		if edit != nil {
			edit(b)
		}
		return b
	}
	now := metav1.Now()
	for _, c := range []struct {
		name    string
		plan    *osbv1alpha1.SFPlan
		binding *osbv1alpha1.SFServiceBinding
		pred    *osbv1alpha1.SFServiceBinding
		want    string
	}{
		{"allowed", plan(ptr.To(true)), binding, bound(nil), ""},
		{"plan silent", plan(nil), binding, bound(nil), `plan "small" does not allow binding rotation (its bindingRotatable is not true)`},
		{"plan says no", plan(ptr.To(false)), binding, bound(nil), `plan "small" does not allow binding rotation (its bindingRotatable is not true)`},
		{"itself", plan(ptr.To(true)), &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "b-1"},
			Spec: osbv1alpha1.SFServiceBindingSpec{ID: "b-1", InstanceID: "db", PredecessorBinding: "b-1"}}, bound(nil),
			`binding "b-1" cannot be its own predecessor`},
		{"missing", plan(ptr.To(true)), binding, nil, `predecessor binding "b-1" does not exist`},
		{"another instance", plan(ptr.To(true)), binding, bound(func(b *osbv1alpha1.SFServiceBinding) { b.Spec.InstanceID = "cache" }),
			`predecessor binding "b-1" belongs to instance "cache", not "db"`},
		{"being unbound", plan(ptr.To(true)), binding, bound(func(b *osbv1alpha1.SFServiceBinding) { b.DeletionTimestamp = &now }),
			`predecessor binding "b-1" is being unbound`},
		{"still binding", plan(ptr.To(true)), binding, bound(func(b *osbv1alpha1.SFServiceBinding) {
			b.Status = osbv1alpha1.SFServiceBindingStatus{State: osbv1alpha1.StateInProgress}
		}), `predecessor binding "b-1" is not bound (in progress)`},
		{"never bound", plan(ptr.To(true)), binding, bound(func(b *osbv1alpha1.SFServiceBinding) { b.Status = osbv1alpha1.SFServiceBindingStatus{} }),
			`predecessor binding "b-1" is not bound (in_queue)`},
		{"bind failed", plan(ptr.To(true)), binding, bound(func(b *osbv1alpha1.SFServiceBinding) {
			b.Status = osbv1alpha1.SFServiceBindingStatus{State: osbv1alpha1.StateFailed}
		}), `predecessor binding "b-1" is not bound (failed)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := rotation.Check(c.plan, c.binding, c.pred)
			if c.want == "" {
				assert.NoError(t, err)
				return
			}
			var refusal *rotation.Refusal
			require.ErrorAs(t, err, &refusal)
			assert.EqualError(t, err, c.want)
		})
	}
}

func TestRotatable(t *testing.T) {
	for _, c := range []struct {
		set  *bool
		want bool
	}{{nil, false}, {ptr.To(false), false}, {ptr.To(true), true}} {
		assert.Equal(t, c.want, rotation.Rotatable(&osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{BindingRotatable: c.set}}))
	}
}
