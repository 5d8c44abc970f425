package lifecycle_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// instance builds an instance at generation gen whose status observed
// observed, in state; applied says whether a provision ever succeeded.
func instance(gen, observed int64, state osbv1alpha1.OperationState, applied bool) *osbv1alpha1.SFServiceInstance {
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: "i", Namespace: "ns", Generation: gen}}
	inst.Status.State, inst.Status.ObservedGeneration = state, observed
	if applied {
		inst.Status.AppliedSpec = &osbv1alpha1.SFServiceInstanceSpec{}
	}
	return inst
}

func deleting[T interface{ SetDeletionTimestamp(*metav1.Time) }](obj T, finalizers ...string) T {
	now := metav1.Now()
	obj.SetDeletionTimestamp(&now)
	if o, ok := any(obj).(interface{ SetFinalizers([]string) }); ok {
		o.SetFinalizers(finalizers)
	}
	return obj
}

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		name string
		inst *osbv1alpha1.SFServiceInstance
		want lifecycle.Operation // "" for nothing
	}{
		{"new", instance(1, 0, "", false), lifecycle.OpProvision},
		{"queued by the broker", instance(1, 0, osbv1alpha1.StateInQueue, false), lifecycle.OpProvision},
		{"provision in progress", instance(1, 0, osbv1alpha1.StateInProgress, false), ""},
		{"provisioned", instance(1, 1, osbv1alpha1.StateSucceeded, true), ""},
		{"failed provision stays failed", instance(1, 1, osbv1alpha1.StateFailed, false), ""},
		{"spec changed after a failed provision", instance(2, 1, osbv1alpha1.StateFailed, false), lifecycle.OpProvision},
		{"spec changed after a provision", instance(2, 1, osbv1alpha1.StateSucceeded, true), lifecycle.OpUpdate},
		{"update asked in the status", instance(1, 1, osbv1alpha1.StateUpdate, true), lifecycle.OpUpdate},
		{"delete asked in the status", instance(1, 1, osbv1alpha1.StateDelete, true), lifecycle.OpDeprovision},
		{"deleted, finalizer held", deleting(instance(1, 1, osbv1alpha1.StateSucceeded, true), osbv1alpha1.InstanceFinalizer), lifecycle.OpDeprovision},
		{"deleted, finalizer released", deleting(instance(1, 1, osbv1alpha1.StateSucceeded, true)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, ok := lifecycle.Requested(tc.inst)
			assert.Equal(t, tc.want != "", ok)
			if ok {
				assert.Equal(t, tc.want, op)
			}
		})
	}
}

func TestRequestedBinding(t *testing.T) {
	binding := func(state osbv1alpha1.OperationState) *osbv1alpha1.SFServiceBinding {
		b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
		b.Status.State = state
		return b
	}
	for _, tc := range []struct {
		name string
		b    *osbv1alpha1.SFServiceBinding
		want lifecycle.Operation
	}{
		{"new", binding(""), lifecycle.OpBind},
		{"queued by the broker", binding(osbv1alpha1.StateInQueue), lifecycle.OpBind},
		{"bind in progress", binding(osbv1alpha1.StateInProgress), ""},
		{"bound", binding(osbv1alpha1.StateSucceeded), ""},
		{"failed bind stays failed", binding(osbv1alpha1.StateFailed), ""},
		{"delete asked in the status", binding(osbv1alpha1.StateDelete), lifecycle.OpUnbind},
		{"deleted, finalizer held", deleting(binding(osbv1alpha1.StateSucceeded), osbv1alpha1.BindingFinalizer), lifecycle.OpUnbind},
		{"deleted, finalizer released", deleting(binding(osbv1alpha1.StateSucceeded)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, ok := lifecycle.RequestedBinding(tc.b)
			assert.Equal(t, tc.want != "", ok)
			if ok {
				assert.Equal(t, tc.want, op)
			}
		})
	}
}

func TestCurrent(t *testing.T) {
	assert.Equal(t, lifecycle.OpProvision, lifecycle.Current(instance(1, 0, "", false)))
	assert.Equal(t, lifecycle.OpProvision, lifecycle.Current(instance(3, 1, osbv1alpha1.StateFailed, false)), "never provisioned: still the provision")
	assert.Equal(t, lifecycle.OpUpdate, lifecycle.Current(instance(2, 1, osbv1alpha1.StateSucceeded, true)))
	assert.Equal(t, lifecycle.OpDeprovision, lifecycle.Current(deleting(instance(2, 2, osbv1alpha1.StateSucceeded, true))))
	// A scheduled provision applies generation 2, the one its scheduling
	// step made: still the provision, until an update asks for more.
	scheduled := instance(2, 2, osbv1alpha1.StateSucceeded, true)
	scheduled.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue,
		Reason: lifecycle.ReadyReason(lifecycle.OpProvision, osbv1alpha1.StateSucceeded), ObservedGeneration: 2}}
	assert.Equal(t, lifecycle.OpProvision, lifecycle.Current(scheduled))
	scheduled.Generation = 3
	assert.Equal(t, lifecycle.OpUpdate, lifecycle.Current(scheduled), "then updated")
	updated := instance(3, 3, osbv1alpha1.StateSucceeded, true)
	updated.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue,
		Reason: lifecycle.ReadyReason(lifecycle.OpUpdate, osbv1alpha1.StateSucceeded), ObservedGeneration: 3}}
	assert.Equal(t, lifecycle.OpUpdate, lifecycle.Current(updated))
	b := &osbv1alpha1.SFServiceBinding{}
	assert.Equal(t, lifecycle.OpBind, lifecycle.CurrentBinding(b))
	assert.Equal(t, lifecycle.OpUnbind, lifecycle.CurrentBinding(deleting(b)))
}

func TestDone(t *testing.T) {
	for _, tc := range []struct {
		name              string
		op                lifecycle.Operation
		state             osbv1alpha1.OperationState
		observed, current int64
		want              bool
	}{
		{"succeeded for this generation", lifecycle.OpProvision, osbv1alpha1.StateSucceeded, 1, 1, true},
		{"failed for this generation", lifecycle.OpUpdate, osbv1alpha1.StateFailed, 2, 2, true},
		{"ended for an older generation", lifecycle.OpUpdate, osbv1alpha1.StateSucceeded, 1, 2, false},
		{"under way", lifecycle.OpBind, osbv1alpha1.StateInProgress, 1, 1, false},
		{"a removal is never done while its resource exists", lifecycle.OpDeprovision, osbv1alpha1.StateSucceeded, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, lifecycle.Done(tc.op, tc.state, tc.observed, tc.current))
		})
	}
}

func TestReadyReason(t *testing.T) {
	assert.Equal(t, "ProvisionSucceeded", lifecycle.ReadyReason(lifecycle.OpProvision, osbv1alpha1.StateSucceeded))
	assert.Equal(t, "DeprovisionFailed", lifecycle.ReadyReason(lifecycle.OpDeprovision, osbv1alpha1.StateFailed))
	assert.Equal(t, "BindInProgress", lifecycle.ReadyReason(lifecycle.OpBind, osbv1alpha1.StateInProgress))

	conds := []metav1.Condition{{Type: lifecycle.ConditionReady, Reason: "UnbindFailed"}}
	assert.True(t, lifecycle.Failed(conds, lifecycle.OpUnbind))
	assert.False(t, lifecycle.Failed(conds, lifecycle.OpDeprovision))
	assert.False(t, lifecycle.Failed(nil, lifecycle.OpUnbind))
}
