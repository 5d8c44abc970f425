package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The conditions of a ServiceBinding, as the specification names them.
const (
	// ConditionReady: the Secret is projected into every selected workload.
	ConditionReady = "Ready"
	// ConditionServiceAvailable: the service names a Secret that exists.
	ConditionServiceAvailable = "ServiceAvailable"
	// ConditionWorkloadProjected: the workloads carry the projection.
	ConditionWorkloadProjected = "WorkloadProjected"
)

// Finalizer holds a ServiceBinding until what it projected is taken back.
const Finalizer = "servicebinding.io/finalizer"

// ServiceBindingWorkloadReference names the workloads to project into: one
// by name, or every one a selector matches.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name or selector must be set"
type ServiceBindingWorkloadReference struct {
	// APIVersion of the workloads, e.g. apps/v1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind of the workloads, e.g. Deployment.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the workload.
	// +optional
	Name string `json:"name,omitempty"`
	// Selector matches the labels of the workloads.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Containers restricts the projection to the containers of these names
	// (all containers when empty).
	// +optional
	Containers []string `json:"containers,omitempty"`
}

// ServiceBindingServiceReference names the service: a Provisioned Service
// (any resource whose status.binding.name names a Secret), or a Secret.
type ServiceBindingServiceReference struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// EnvMapping puts one entry of the Secret into an environment variable.
type EnvMapping struct {
	// Name of the variable.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key of the Secret's entry.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ServiceBindingSpec is what to project where.
type ServiceBindingSpec struct {
	// Name of the binding's directory under $SERVICE_BINDING_ROOT
	// (default: the ServiceBinding's name).
	// +optional
	Name string `json:"name,omitempty"`
	// Type is the binding's type, projected as the file "type" when the
	// Secret has none.
	// +optional
	Type string `json:"type,omitempty"`
	// Provider is the binding's provider, projected as the file "provider"
	// when the Secret has none.
	// +optional
	Provider string                          `json:"provider,omitempty"`
	Workload ServiceBindingWorkloadReference `json:"workload"`
	Service  ServiceBindingServiceReference  `json:"service"`
	// Env maps entries of the Secret to environment variables.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []EnvMapping `json:"env,omitempty"`
}

// ServiceBindingSecretReference names the Secret a binding projects.
type ServiceBindingSecretReference struct {
	Name string `json:"name"`
}

// ServiceBindingStatus is what was projected, in the specification's terms,
// and where.
type ServiceBindingStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Ready, ServiceAvailable and WorkloadProjected.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Binding is the Secret projected.
	// +optional
	Binding *ServiceBindingSecretReference `json:"binding,omitempty"`
	// Projected is where the projection is now, so that it can be taken
	// back: the workloads' kind and paths, and their names.
	// +optional
	Projected *Projected `json:"projected,omitempty"`
}

// Projected is where a ServiceBinding's projection is.
type Projected struct {
	// APIVersion and Kind of the workloads.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Workloads are the names of the workloads projected into.
	Workloads []string `json:"workloads"`
}

// ServiceBinding projects a service's Secret into workloads, as the Service
// Binding for Kubernetes specification (servicebinding.io) says.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceBindingSpec   `json:"spec"`
	Status ServiceBindingStatus `json:"status,omitempty"`
}

// ServiceBindingList is a list of ServiceBindings.
// +kubebuilder:object:root=true
type ServiceBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceBinding `json:"items"`
}

// ClusterWorkloadResourceMappingContainer says where a workload keeps one
// list of containers, and their fields, as fixed JSONPaths.
type ClusterWorkloadResourceMappingContainer struct {
	// Path of the containers, e.g. .spec.jobTemplate.spec.template.spec.containers[*].
	// +kubebuilder:validation:MinLength=1
	Path string `json:"path"`
	// Name of a container (default .name).
	// +optional
	Name string `json:"name,omitempty"`
	// Env of a container (default .env).
	// +optional
	Env string `json:"env,omitempty"`
	// VolumeMounts of a container (default .volumeMounts).
	// +optional
	VolumeMounts string `json:"volumeMounts,omitempty"`
}

// ClusterWorkloadResourceMappingTemplate maps one version of a workload
// resource to a PodTemplateSpec-like shape.
type ClusterWorkloadResourceMappingTemplate struct {
	// Version of the resource, or "*" for every version not listed.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// Annotations of the pod template (default .spec.template.metadata.annotations).
	// +optional
	Annotations string `json:"annotations,omitempty"`
	// Containers are where the containers are (default: .spec.template.spec.containers[*]
	// and .spec.template.spec.initContainers[*]).
	// +optional
	Containers []ClusterWorkloadResourceMappingContainer `json:"containers,omitempty"`
	// Volumes of the pod template (default .spec.template.spec.volumes).
	// +optional
	Volumes string `json:"volumes,omitempty"`
}

// ClusterWorkloadResourceMappingSpec lists a resource's versions.
type ClusterWorkloadResourceMappingSpec struct {
	// +listType=map
	// +listMapKey=version
	Versions []ClusterWorkloadResourceMappingTemplate `json:"versions"`
}

// ClusterWorkloadResourceMapping says where a workload resource that is not
// PodSpec-able keeps its pod template; its name is <plural>.<group>.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
type ClusterWorkloadResourceMapping struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterWorkloadResourceMappingSpec `json:"spec"`
}

// ClusterWorkloadResourceMappingList is a list of ClusterWorkloadResourceMappings.
// +kubebuilder:object:root=true
type ClusterWorkloadResourceMappingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterWorkloadResourceMapping `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServiceBinding{}, &ServiceBindingList{},
		&ClusterWorkloadResourceMapping{}, &ClusterWorkloadResourceMappingList{})
}
