package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResourceReference is the group, version and kind of a resource type.
type ResourceReference struct {
	// +kubebuilder:validation:MinLength=1
	Group string `json:"group"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
}

// UsageKindSpec makes a resource type a target for binding injection.
type UsageKindSpec struct {
	// DisplayName is a human-readable name of the usage kind.
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// Resource is the type of the resources bindings are injected into.
	Resource ResourceReference `json:"resource"`
	// LabelsPath is the dot-separated path of the labels map of the pod
	// template inside the target resource, e.g. spec.template.metadata.labels.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	LabelsPath string `json:"labelsPath"`
}

// UsageKindStatus is what Quartermaster observed of a usage kind.
type UsageKindStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UsageKind is a cluster-wide definition of a kind that bindings can be used by.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=quartermaster
// +kubebuilder:printcolumn:name="Display Name",type=string,JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.resource.group`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.resource.kind`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type UsageKind struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UsageKindSpec   `json:"spec"`
	Status UsageKindStatus `json:"status,omitempty"`
}

// UsageKindList is a list of UsageKind.
// +kubebuilder:object:root=true
type UsageKindList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UsageKind `json:"items"`
}

func init() {
	SchemeBuilder.Register(&UsageKind{}, &UsageKindList{})
}
