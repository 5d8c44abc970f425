package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterState says whether instances can be scheduled on a cluster.
// +kubebuilder:validation:Enum=Ready;Unreachable;Unknown
type ClusterState string

const (
	ClusterReady       ClusterState = "Ready"
	ClusterUnreachable ClusterState = "Unreachable"
	ClusterUnknown     ClusterState = "Unknown"
)

// SFClusterSpec registers a Kubernetes cluster that instances can be scheduled on.
type SFClusterSpec struct {
	// SecretRef is the name of a Secret, next to the SFCluster, whose
	// "kubeconfig" key reaches the cluster.
	// +kubebuilder:validation:MinLength=1
	SecretRef string `json:"secretRef"`
	// SchedulingLimitPercentage caps how much of TotalCapacity the scheduler fills.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SchedulingLimitPercentage *int32 `json:"schedulingLimitPercentage,omitempty"`
	// TotalCapacity overrides the capacity read from the cluster's nodes.
	// +optional
	TotalCapacity corev1.ResourceList `json:"totalCapacity,omitempty"`
}

// SFClusterStatus is what the scheduler observed of a cluster.
type SFClusterStatus struct {
	// +optional
	State ClusterState `json:"state,omitempty"`
	// ServiceInstanceCount is the number of instances scheduled on the cluster.
	// +optional
	ServiceInstanceCount int64 `json:"serviceInstanceCount,omitempty"`
	// +optional
	CurrentCapacity corev1.ResourceList `json:"currentCapacity,omitempty"`
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SFCluster is a cluster that service instances are provisioned on. The name
// "1" is reserved for the cluster Quartermaster itself runs on.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfc,categories=quartermaster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.secretRef`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.serviceInstanceCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SFCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SFClusterSpec   `json:"spec"`
	Status SFClusterStatus `json:"status,omitempty"`
}

// SFClusterList is a list of SFCluster.
// +kubebuilder:object:root=true
type SFClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SFCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SFCluster{}, &SFClusterList{})
}
