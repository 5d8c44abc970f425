package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalCluster is the name of the SFCluster that stands for the cluster
// Quartermaster itself runs in, reserved for it as Service Fabrik's
// inter-operator reserves it. An instance whose spec.clusterId is empty is
// there too (it predates scheduling).
const LocalCluster = "1"

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
	// TotalCapacity overrides the capacity read from the cluster's nodes,
	// for the resources it names: an autoscaler's maximum, say.
	// +optional
	TotalCapacity corev1.ResourceList `json:"totalCapacity,omitempty"`
	// AllowInsecureSkipTLSVerify lets the kubeconfig set
	// insecure-skip-tls-verify; without it such a kubeconfig is refused.
	// +optional
	AllowInsecureSkipTLSVerify bool `json:"allowInsecureSkipTLSVerify,omitempty"`
}

// SFClusterStatus is what the scheduler observed of a cluster.
type SFClusterStatus struct {
	// +optional
	State ClusterState `json:"state,omitempty"`
	// KubernetesVersion is what the cluster's API server reported at the
	// last probe.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// ServiceInstanceCount is the number of instances scheduled on the cluster.
	// +optional
	ServiceInstanceCount int64 `json:"serviceInstanceCount"`
	// TotalCapacity is what the scheduler fills: spec.totalCapacity for
	// the resources it names (capacity an autoscaler may still add), the
	// nodes' allocatable for the others.
	// +optional
	TotalCapacity corev1.ResourceList `json:"totalCapacity,omitempty"`
	// CurrentCapacity is the capacity of the nodes there are now: the sum
	// of the schedulable nodes' allocatable, as Service Fabrik names it.
	// +optional
	CurrentCapacity corev1.ResourceList `json:"currentCapacity,omitempty"`
	// Allocatable is the sum of the schedulable nodes' allocatable.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// ProbedAt is when the cluster last answered the probe that wrote
	// Allocatable and Requests.
	// +optional
	ProbedAt metav1.Time `json:"probedAt,omitempty"`
	// Requests are the requests of the pods running or pending on the
	// cluster, and their number under "pods".
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
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.kubernetesVersion`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.serviceInstanceCount`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.requests.cpu`,description="CPU requested by the cluster's pods"
// +kubebuilder:printcolumn:name="CPU Capacity",type=string,JSONPath=`.status.totalCapacity.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.requests.memory`,description="memory requested by the cluster's pods"
// +kubebuilder:printcolumn:name="Memory Capacity",type=string,JSONPath=`.status.totalCapacity.memory`
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.spec.schedulingLimitPercentage`,description="percent of the capacity the scheduler fills"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.secretRef`,priority=1
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
