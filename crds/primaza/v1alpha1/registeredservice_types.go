package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceState is where a RegisteredService stands in its life, as in
// Primaza.
// +kubebuilder:validation:Enum=Available;Claimed;Unknown;Unreachable
type ServiceState string

const (
	// ServiceAvailable: healthy, or without a health check, and free to claim.
	ServiceAvailable ServiceState = "Available"
	// ServiceClaimed: healthy and held by a ServiceClaim.
	ServiceClaimed ServiceState = "Claimed"
	// ServiceUnknown: the health check has not run yet, or could not tell.
	ServiceUnknown ServiceState = "Unknown"
	// ServiceUnreachable: the health check failed.
	ServiceUnreachable ServiceState = "Unreachable"
)

// ServiceClassIdentityItem is one key/value pair of a service's class identity.
type ServiceClassIdentityItem struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Value string `json:"value"`
}

// SecretKeyRef names one key of a Secret next to the referring object.
type SecretKeyRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ServiceEndpointDefinitionItem is one piece of connection or authentication
// data, given literally or read from a Secret.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFromSecret)",message="exactly one of value or valueFromSecret must be set"
type ServiceEndpointDefinitionItem struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	Value *string `json:"value,omitempty"`
	// +optional
	ValueFromSecret *SecretKeyRef `json:"valueFromSecret,omitempty"`
}

// Constraints restrict where a service may be claimed from.
type Constraints struct {
	// Environments lists environments the service may be claimed from. An
	// entry prefixed with "!" excludes an environment, and exclusions win.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Pattern=`^!?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Environments []string `json:"environments,omitempty"`
}

// HealthCheckContainer is a container that exits 0 while the service is healthy.
type HealthCheckContainer struct {
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// +optional
	Command []string `json:"command,omitempty"`
	// Minutes between two checks.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	Minutes int32 `json:"minutes,omitempty"`
}

// HealthCheck verifies that a registered service is online and usable.
type HealthCheck struct {
	Container HealthCheckContainer `json:"container"`
}

// RegisteredServiceSpec describes an already running service.
type RegisteredServiceSpec struct {
	// ServiceClassIdentity identifies the class of the service, e.g. type and provider.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	ServiceClassIdentity []ServiceClassIdentityItem `json:"serviceClassIdentity"`
	// ServiceEndpointDefinition holds what a client needs to connect and authenticate.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	ServiceEndpointDefinition []ServiceEndpointDefinitionItem `json:"serviceEndpointDefinition"`
	// +optional
	Constraints *Constraints `json:"constraints,omitempty"`
	// HealthCheck is run every healthcheck.container.minutes; without it the
	// service is Available as soon as it is registered.
	// +optional
	HealthCheck *HealthCheck `json:"healthcheck,omitempty"`
	// SLA names the service level the service offers, e.g. "gold".
	// +optional
	SLA string `json:"sla,omitempty"`
}

// RegisteredServiceStatus is what the health checks and claims observed.
type RegisteredServiceStatus struct {
	// +optional
	State ServiceState `json:"state,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RegisteredService is an already running service that applications can claim.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rs,categories=quartermaster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="SLA",type=string,JSONPath=`.spec.sla`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RegisteredService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RegisteredServiceSpec   `json:"spec"`
	Status RegisteredServiceStatus `json:"status,omitempty"`
}

// RegisteredServiceList is a list of RegisteredService.
// +kubebuilder:object:root=true
type RegisteredServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RegisteredService `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RegisteredService{}, &RegisteredServiceList{})
}
