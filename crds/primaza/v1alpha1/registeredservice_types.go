package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// HealthCheckContainer is a container that exits 0 while the service is
// healthy. It runs as a Job in the service's namespace, with its privileges
// stripped.
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
	// TimeoutSeconds bounds one check (the Job's activeDeadlineSeconds); a
	// check that runs longer tells nothing, and leaves the service Unknown.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// EndpointEnv gives the container the service's endpoint definition as
	// environment variables ENDPOINT_<NAME>, secret values through
	// secretKeyRefs, so that the check can test authentication too.
	// +optional
	EndpointEnv bool `json:"endpointEnv,omitempty"`
}

// TCPCheck is healthy when a TCP connection opens. The worker runs it; no
// pod is needed.
// +kubebuilder:validation:XValidation:rule="has(self.host) || (has(self.fromEndpoint) && has(self.fromEndpoint.host))",message="give host, or fromEndpoint.host"
// +kubebuilder:validation:XValidation:rule="has(self.port) || (has(self.fromEndpoint) && has(self.fromEndpoint.port))",message="give port, or fromEndpoint.port"
type TCPCheck struct {
	// +optional
	Host string `json:"host,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// FromEndpoint names the items of serviceEndpointDefinition that hold
	// the host and the port, for whatever host or port is not given.
	// +optional
	FromEndpoint *TCPFromEndpoint `json:"fromEndpoint,omitempty"`
	// Minutes between two checks.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	Minutes int32 `json:"minutes,omitempty"`
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// TCPFromEndpoint names endpoint definition items.
type TCPFromEndpoint struct {
	// +optional
	Host string `json:"host,omitempty"`
	// +optional
	Port string `json:"port,omitempty"`
}

// HTTPCheck is healthy when a GET of the URL answers the expected status.
// The worker runs it; no pod is needed.
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.fromEndpoint)",message="give exactly one of url or fromEndpoint"
type HTTPCheck struct {
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url,omitempty"`
	// FromEndpoint names the item of serviceEndpointDefinition that holds
	// the URL.
	// +optional
	FromEndpoint *HTTPFromEndpoint `json:"fromEndpoint,omitempty"`
	// ExpectedStatus is the HTTP status of a healthy service.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=599
	ExpectedStatus int32 `json:"expectedStatus,omitempty"`
	// CABundle is a PEM bundle to trust for https, read from a Secret.
	// +optional
	CABundle *SecretKeyRef `json:"caBundle,omitempty"`
	// Minutes between two checks.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	Minutes int32 `json:"minutes,omitempty"`
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// HTTPFromEndpoint names an endpoint definition item.
type HTTPFromEndpoint struct {
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
}

// HealthCheck verifies that a registered service is online and usable:
// exactly one of container (Primaza), tcp or http.
// +kubebuilder:validation:XValidation:rule="(has(self.container) ? 1 : 0) + (has(self.tcp) ? 1 : 0) + (has(self.http) ? 1 : 0) == 1",message="give exactly one kind of check: container, tcp or http"
type HealthCheck struct {
	// +optional
	Container *HealthCheckContainer `json:"container,omitempty"`
	// +optional
	TCP *TCPCheck `json:"tcp,omitempty"`
	// +optional
	HTTP *HTTPCheck `json:"http,omitempty"`
	// FailureThreshold is how many failed checks in a row make a healthy
	// service Unreachable.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// SuccessThreshold is how many successful checks in a row make an
	// Unreachable service healthy again.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
}

// CheckResult is what one health check told.
// +kubebuilder:validation:Enum=Succeeded;Failed;Unknown
type CheckResult string

const (
	CheckSucceeded CheckResult = "Succeeded"
	CheckFailed    CheckResult = "Failed"
	// CheckUnknown: the check could not run, or ran out of time.
	CheckUnknown CheckResult = "Unknown"
)

// HealthCheckStatus is what the health checks of a service observed.
type HealthCheckStatus struct {
	// LastCheckTime is when a check last ended. While nothing else changes
	// it is refreshed at most every ten minutes, so that checks that agree
	// write nothing.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`
	// +optional
	LastResult CheckResult `json:"lastResult,omitempty"`
	// Message says what the last check saw.
	// +optional
	Message string `json:"message,omitempty"`
	// ConsecutiveFailures counts failed checks in a row, up to
	// failureThreshold.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// ConsecutiveSuccesses counts successful checks in a row, up to
	// successThreshold.
	// +optional
	ConsecutiveSuccesses int32 `json:"consecutiveSuccesses,omitempty"`
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
	// HealthCheck is run every <kind>.minutes; without it the service is
	// Available as soon as it is registered.
	// +optional
	HealthCheck *HealthCheck `json:"healthcheck,omitempty"`
	// SeedHealthCheck is the spelling of Primaza's example ("health
	// check"), accepted as the same field; healthcheck wins.
	// +optional
	SeedHealthCheck *HealthCheck `json:"health check,omitempty"`
	// SLA names the service level the service offers, e.g. "gold".
	// +optional
	SLA string `json:"sla,omitempty"`
}

// ClaimReference names the ServiceClaim, in the service's namespace, that
// holds a service.
type ClaimReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
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
	// HealthCheck is what the health checks observed.
	// +optional
	HealthCheck *HealthCheckStatus `json:"healthCheck,omitempty"`
	// ClaimRef is the ServiceClaim that holds the service; release goes by
	// it. A service that recovers from Unreachable returns to Claimed while
	// it is set.
	// +optional
	ClaimRef *ClaimReference `json:"claimRef,omitempty"`
}

// RegisteredService is an already running service that applications can claim.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=regsvc,categories=quartermaster
// +kubebuilder:selectablefield:JSONPath=`.status.claimRef.uid`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Check",type=string,JSONPath=`.status.healthCheck.message`,priority=1
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
