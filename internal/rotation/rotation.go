// Package rotation holds the rules of OSB binding rotation (OSB 2.17): a new
// binding names its predecessor, gets credentials of its own while the
// predecessor keeps working, and the platform unbinds the predecessor once
// its applications have moved. The API refuses a rotation that breaks a
// rule with 400; the worker fails a binding made with kubectl that breaks
// one, with the same message.
package rotation

import (
	"fmt"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Refusal is a rotation the rules do not allow; its message says why.
type Refusal struct {
	msg string
}

func (r *Refusal) Error() string { return r.msg }

func refuse(format string, args ...any) *Refusal {
	return &Refusal{msg: fmt.Sprintf(format, args...)}
}

// Rotatable reports whether the bindings of a plan can be rotated: the
// plan's bindingRotatable, false unless set.
func Rotatable(p *osbv1alpha1.SFPlan) bool {
	return p.Spec.BindingRotatable != nil && *p.Spec.BindingRotatable
}

// Check says why binding b may not rotate pred (nil: pred does not exist),
// or returns nil when it may. b's spec names pred by its resource name;
// what the messages call the predecessor is its OSB binding_id when it has
// one.
func Check(p *osbv1alpha1.SFPlan, b *osbv1alpha1.SFServiceBinding, pred *osbv1alpha1.SFServiceBinding) error {
	name := b.Spec.PredecessorBinding
	switch {
	case !Rotatable(p):
		return refuse("plan %q does not allow binding rotation (its bindingRotatable is not true)", p.Spec.Name)
	case name == b.Name:
		return refuse("binding %q cannot be its own predecessor", b.Spec.ID)
	case pred == nil:
		return refuse("predecessor binding %q does not exist", name)
	case pred.Spec.InstanceID != b.Spec.InstanceID:
		return refuse("predecessor binding %q belongs to instance %q, not %q", pred.Spec.ID, pred.Spec.InstanceID, b.Spec.InstanceID)
	case pred.DeletionTimestamp != nil:
		return refuse("predecessor binding %q is being unbound", pred.Spec.ID)
	case pred.Status.State != osbv1alpha1.StateSucceeded || pred.Status.AppliedSpec == nil:
		return refuse("predecessor binding %q is not bound (%s)", pred.Spec.ID, stateOf(pred))
	}
	return nil
}

func stateOf(b *osbv1alpha1.SFServiceBinding) string {
	if b.Status.State == "" {
		return string(osbv1alpha1.StateInQueue)
	}
	return string(b.Status.State)
}
