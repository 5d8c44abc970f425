// Package lifecycle holds the rules of an instance's and a binding's
// lifecycle, in one place for the three parts that need them: which
// operation a resource asks for (the watcher), which operation its status
// speaks of (the OSB API), and whether an operation already ran to its end
// (the activities). It is pure: it reads resources and imports neither
// Temporal nor a Kubernetes client.
package lifecycle

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"strings"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Kind is the kind of resource an operation works on.
type Kind string

const (
	KindInstance Kind = "SFServiceInstance"
	KindBinding  Kind = "SFServiceBinding"
)

// Operation is what is being done to an instance or binding. The names are
// the keys of a plan's status template.
type Operation string

const (
	OpProvision   Operation = "provision"
	OpUpdate      Operation = "update"
	OpDeprovision Operation = "deprovision"
	OpBind        Operation = "bind"
	OpUnbind      Operation = "unbind"
)

// Target names the instance or binding an operation works on. It carries
// names only: workflow histories never hold parameters or credentials.
type Target struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ConditionReady is the condition every operation leaves on its resource.
const ConditionReady = "Ready"

// ConditionStarted is False while the watcher cannot start a resource's
// run (the workflow engine is unreachable), with the reason.
const ConditionStarted = "Started"

// Removes reports whether the operation takes its target away.
func (o Operation) Removes() bool { return o == OpDeprovision || o == OpUnbind }

// Title is the operation's name capitalised, "Provision" for provision: the
// name of its workflow type and the start of its Ready reasons.
func (o Operation) Title() string {
	if o == "" {
		return ""
	}
	return strings.ToUpper(string(o[:1])) + string(o[1:])
}

// InstanceTarget and BindingTarget name a resource as an operation's target.
func InstanceTarget(inst *osbv1alpha1.SFServiceInstance) Target {
	return Target{Kind: KindInstance, Namespace: inst.Namespace, Name: inst.Name}
}

func BindingTarget(b *osbv1alpha1.SFServiceBinding) Target {
	return Target{Kind: KindBinding, Namespace: b.Namespace, Name: b.Name}
}

// Requested is the operation an instance asks for, if any. A deletion asks
// for a deprovision while the finalizer holds the instance; "delete" in the
// status asks for the deletion itself (a client of the inter-operator
// writes it), which the caller carries out. An instance never provisioned
// asks for a provision, a changed spec or "update" for an update. Nothing is
// asked while an operation is in progress or after it ended for the current
// generation.
func Requested(inst *osbv1alpha1.SFServiceInstance) (Operation, bool) {
	st := inst.Status
	switch {
	case inst.DeletionTimestamp != nil:
		return OpDeprovision, controllerutil.ContainsFinalizer(inst, osbv1alpha1.InstanceFinalizer)
	case st.State == osbv1alpha1.StateDelete:
		return OpDeprovision, true
	case st.State == osbv1alpha1.StateInProgress:
		return "", false
	case st.State == osbv1alpha1.StateUpdate:
		return OpUpdate, true
	case st.State == "" || st.State == osbv1alpha1.StateInQueue || st.ObservedGeneration != inst.Generation:
		if st.AppliedSpec != nil {
			return OpUpdate, true
		}
		return OpProvision, true
	default:
		return "", false
	}
}

// RequestedBinding is the operation a binding asks for, if any. Bindings
// are immutable in OSB: after the bind, only a deletion (or "delete" in the
// status) asks for something.
func RequestedBinding(b *osbv1alpha1.SFServiceBinding) (Operation, bool) {
	switch {
	case b.DeletionTimestamp != nil:
		return OpUnbind, controllerutil.ContainsFinalizer(b, osbv1alpha1.BindingFinalizer)
	case b.Status.State == osbv1alpha1.StateDelete:
		return OpUnbind, true
	case b.Status.State == "" || b.Status.State == osbv1alpha1.StateInQueue:
		return OpBind, true
	default:
		return "", false
	}
}

// Current is the operation an instance's status speaks of: the one under
// way, or the last one.
func Current(inst *osbv1alpha1.SFServiceInstance) Operation {
	switch {
	case inst.DeletionTimestamp != nil:
		return OpDeprovision
	case inst.Generation <= 1 || inst.Status.AppliedSpec == nil:
		return OpProvision
	case provisioned(inst.Status.Conditions, inst.Generation):
		// A scheduled provision applies the generation its scheduling step
		// made by writing spec.clusterId: no update has been asked for.
		return OpProvision
	default:
		return OpUpdate
	}
}

// provisioned reports whether the Ready condition says a provision ended
// at generation.
func provisioned(conds []metav1.Condition, generation int64) bool {
	c := meta.FindStatusCondition(conds, ConditionReady)
	return c != nil && c.ObservedGeneration == generation &&
		(c.Reason == ReadyReason(OpProvision, osbv1alpha1.StateSucceeded) || c.Reason == ReadyReason(OpProvision, osbv1alpha1.StateFailed))
}

// CurrentBinding is the operation a binding's status speaks of.
func CurrentBinding(b *osbv1alpha1.SFServiceBinding) Operation {
	if b.DeletionTimestamp != nil {
		return OpUnbind
	}
	return OpBind
}

// Done reports whether op already ran to its end for the resource's
// generation, so that a repeated start of the same operation changes
// nothing. A removal is never done while its resource exists.
func Done(op Operation, state osbv1alpha1.OperationState, observedGeneration, generation int64) bool {
	return !op.Removes() && state.Terminal() && observedGeneration == generation
}

// ReadyReason is the reason of the Ready condition that op leaves in state,
// e.g. "ProvisionSucceeded" or "DeprovisionFailed".
func ReadyReason(op Operation, state osbv1alpha1.OperationState) string {
	name := op.Title()
	switch state {
	case osbv1alpha1.StateSucceeded:
		return name + "Succeeded"
	case osbv1alpha1.StateFailed:
		return name + "Failed"
	default:
		return name + "InProgress"
	}
}

// Failed reports whether the Ready condition says op failed: how a removal
// that failed is told from one still under way, whose state may read
// "failed" from an earlier operation.
func Failed(conds []metav1.Condition, op Operation) bool {
	c := meta.FindStatusCondition(conds, ConditionReady)
	return c != nil && c.Reason == ReadyReason(op, osbv1alpha1.StateFailed)
}
