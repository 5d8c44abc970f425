package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UsageState is where a ServiceBindingUsage stands.
// +kubebuilder:validation:Enum=Pending;Ready;Failed
type UsageState string

const (
	UsagePending UsageState = "Pending"
	UsageReady   UsageState = "Ready"
	UsageFailed  UsageState = "Failed"
)

// LocalReference names an object in the same namespace.
type LocalReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// UsedBy names the workload a binding is injected into. Kind is the name of
// a UsageKind.
type UsedBy struct {
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// EnvPrefix is prepended to every injected environment variable.
type EnvPrefix struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// UsageParameters tune how a binding is injected.
type UsageParameters struct {
	// +optional
	EnvPrefix *EnvPrefix `json:"envPrefix,omitempty"`
}

// ServiceBindingUsageSpec injects a binding's credentials into a workload.
type ServiceBindingUsageSpec struct {
	// ServiceBindingRef names the SFServiceBinding whose credentials are injected.
	ServiceBindingRef LocalReference `json:"serviceBindingRef"`
	// UsedBy names the workload that receives them.
	UsedBy UsedBy `json:"usedBy"`
	// +optional
	Parameters *UsageParameters `json:"parameters,omitempty"`
}

// ServiceBindingUsageStatus is what was injected, and whether it worked.
type ServiceBindingUsageStatus struct {
	// +optional
	State UsageState `json:"state,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceBindingUsage injects a service binding into a workload of a UsageKind.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbu,categories=quartermaster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Binding",type=string,JSONPath=`.spec.serviceBindingRef.name`
// +kubebuilder:printcolumn:name="Used By",type=string,JSONPath=`.spec.usedBy.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceBindingUsage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceBindingUsageSpec   `json:"spec"`
	Status ServiceBindingUsageStatus `json:"status,omitempty"`
}

// ServiceBindingUsageList is a list of ServiceBindingUsage.
// +kubebuilder:object:root=true
type ServiceBindingUsageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceBindingUsage `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServiceBindingUsage{}, &ServiceBindingUsageList{})
}
