package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// OperationState is the state of the operation last requested on an
// SFServiceInstance or SFServiceBinding. The strings are the Service Fabrik
// inter-operator's, so clients written for it read them unchanged.
// +kubebuilder:validation:Enum=in_queue;update;delete;"in progress";succeeded;failed
type OperationState string

const (
	// StateInQueue marks a request recorded by the broker and not yet picked up.
	StateInQueue OperationState = "in_queue"
	// StateUpdate asks for the instance to be rendered and applied again.
	StateUpdate OperationState = "update"
	// StateDelete asks for the instance or binding to be removed.
	StateDelete OperationState = "delete"
	// StateInProgress marks an operation a workflow is working on.
	StateInProgress OperationState = "in progress"
	// StateSucceeded marks an operation that completed.
	StateSucceeded OperationState = "succeeded"
	// StateFailed marks an operation that ended with an error.
	StateFailed OperationState = "failed"
)

// Finalizers that hold a resource until its workflow has removed what it
// created. The admission policies in crds/policies set them on create.
const (
	InstanceFinalizer = "quartermaster.io/deprovision"
	BindingFinalizer  = "quartermaster.io/unbind"
)

// CredentialsJSONKeysAnnotation lists, comma-separated, the keys of a
// binding's credentials Secret whose values are JSON (numbers, objects,
// lists) rather than plain strings, so that the OSB API gives them back
// with their types.
const CredentialsJSONKeysAnnotation = "quartermaster.io/json-keys"

// CredentialsBindingLabel names, on a binding's credentials Secret, the
// SFServiceBinding whose credentials it holds: the readers of a binding
// that another watcher shard owns learn from its Secret that the binding
// has credentials.
const CredentialsBindingLabel = "quartermaster.io/binding"

// Terminal reports whether no workflow is working on the operation any more.
func (s OperationState) Terminal() bool {
	return s == StateSucceeded || s == StateFailed
}

// ConditionsOf are the status conditions of an instance or a binding, for
// code that writes a condition on either alike; nil for another object.
func ConditionsOf(obj any) *[]metav1.Condition {
	switch o := obj.(type) {
	case *SFServiceInstance:
		return &o.Status.Conditions
	case *SFServiceBinding:
		return &o.Status.Conditions
	}
	return nil
}

// Source names one Kubernetes object that an instance or binding created or
// reads its status from.
type Source struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}
