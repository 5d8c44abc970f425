package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// UsageState is where a ServiceBindingUsage stands.
// +kubebuilder:validation:Enum=Pending;Ready;Failed
type UsageState string

const (
	// UsagePending waits for something to exist: the UsageKind, the
	// workload, the binding or its Secret.
	UsagePending UsageState = "Pending"
	// UsageReady has the binding injected into the workload.
	UsageReady UsageState = "Ready"
	// UsageFailed needs a change by someone: a conflict with the
	// workload's own fields, a path that is not a pod template, missing
	// RBAC.
	UsageFailed UsageState = "Failed"
)

// Binding kinds a usage can inject.
const (
	BindingKindSFServiceBinding = "SFServiceBinding"
	BindingKindServiceClaim     = "ServiceClaim"
)

// Finalizers of Kyma's design.
const (
	// UsageProtection holds a ServiceBindingUsage until its injection is
	// removed from the workload.
	UsageProtection = "servicecatalog.kyma-project.io/sbu-protection"
	// UsageKindProtection holds a UsageKind while a ServiceBindingUsage
	// names it.
	UsageKindProtection = "servicecatalog.kyma-project.io/usage-kind-protection"
)

// BindingReference names the binding whose credentials are injected: an
// SFServiceBinding (its credentials Secret), or a ServiceClaim (its binding
// Secret), beside the usage.
type BindingReference struct {
	// +kubebuilder:validation:Enum=SFServiceBinding;ServiceClaim
	// +kubebuilder:default=SFServiceBinding
	// +optional
	Kind string `json:"kind,omitempty"`
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
	// EnvPrefix is prepended to the name of every injected variable.
	// +optional
	EnvPrefix *EnvPrefix `json:"envPrefix,omitempty"`
	// Volume also mounts the credentials in the servicebinding.io layout:
	// $SERVICE_BINDING_ROOT/<binding>/<key>, with the files type and
	// provider (SERVICE_BINDING_ROOT is /bindings unless the container
	// sets it).
	// +optional
	Volume bool `json:"volume,omitempty"`
}

// ServiceBindingUsageSpec injects a binding's credentials into a workload.
type ServiceBindingUsageSpec struct {
	// ServiceBindingRef names the binding whose credentials are injected.
	ServiceBindingRef BindingReference `json:"serviceBindingRef"`
	// UsedBy names the workload that receives them.
	UsedBy UsedBy `json:"usedBy"`
	// +optional
	Parameters *UsageParameters `json:"parameters,omitempty"`
}

// UsageKindSnapshot is the UsageKind a usage was injected with (Kyma's
// snapshot): the injection can be removed with it after the UsageKind
// changed or went.
type UsageKindSnapshot struct {
	// Name is the UsageKind's name.
	Name string `json:"name"`
	// Resource is the kind as served: its exact Kind and its version.
	Resource ResourceReference `json:"resource"`
	// LabelsPath and ContainersPath as resolved on the workload.
	LabelsPath     string `json:"labelsPath"`
	ContainersPath string `json:"containersPath,omitempty"`
}

// GVK is the group, version and kind of the snapshot's resource.
func (s UsageKindSnapshot) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: s.Resource.Group, Version: s.Resource.Version, Kind: s.Resource.Kind}
}

// ServiceBindingUsageStatus is what was injected, and whether it worked.
type ServiceBindingUsageStatus struct {
	// +optional
	State UsageState `json:"state,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// UsageKind is the snapshot of the UsageKind the injection was made with.
	// +optional
	UsageKind *UsageKindSnapshot `json:"usageKind,omitempty"`
	// Workload names the object the binding is injected into now.
	// +optional
	Workload string `json:"workload,omitempty"`
	// Secret names the Secret whose keys are injected.
	// +optional
	Secret string `json:"secret,omitempty"`
	// Env lists the injected variables (names only; their values stay in
	// the Secret).
	// +optional
	Env []string `json:"env,omitempty"`
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
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.usedBy.kind`
// +kubebuilder:printcolumn:name="Used By",type=string,JSONPath=`.spec.usedBy.name`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
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
