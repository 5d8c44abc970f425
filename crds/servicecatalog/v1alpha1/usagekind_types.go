package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Conditions of a UsageKind.
const (
	// UsageKindResolved says whether the kind's resource is served (discovery).
	UsageKindResolved = "Resolved"
	// UsageKindPermitted says whether Quartermaster may get, list, watch
	// and patch the kind's resources (RBAC).
	UsageKindPermitted = "Permitted"
	// UsageKindReady is both.
	UsageKindReady = "Ready"
)

// ResourceReference is the group, version and kind of a resource type. The
// kind may be written in lower case, as Kyma's examples do
// ("deployment"): it is matched against the kind and the resource names.
type ResourceReference struct {
	// Group is the API group; "" is the core group.
	// +optional
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
	// It need not exist in a workload: injection creates it. The pod
	// template's annotations are its sibling.
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*\\.labels$')`,message="labelsPath is a dot-separated path that ends in .labels, e.g. spec.template.metadata.labels"
	LabelsPath string `json:"labelsPath"`
	// ContainersPath is the dot-separated path of the pod template's
	// containers. Default: spec.template.spec.containers, or
	// spec.jobTemplate.spec.template.spec.containers for a kind whose pods
	// come from a job template (CronJob). The volumes of the binding go
	// beside the containers.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*\\.containers$')`,message="containersPath is a dot-separated path that ends in .containers, e.g. spec.deployment.spec.template.spec.containers"
	ContainersPath string `json:"containersPath,omitempty"`
}

// UsageKindStatus is what Quartermaster observed of a usage kind.
type UsageKindStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Resource is the plural resource name the kind resolved to, e.g.
	// deployments.apps.
	// +optional
	Resource string `json:"resource,omitempty"`
	// Usages counts the ServiceBindingUsages that name this kind; while
	// there are any, the kind keeps its protection finalizer.
	// +optional
	Usages int `json:"usages,omitempty"`
	// Conditions are Resolved, Permitted and Ready.
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
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.status.resource`
// +kubebuilder:printcolumn:name="Usages",type=integer,JSONPath=`.status.usages`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
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
