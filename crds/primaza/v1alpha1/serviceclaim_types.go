package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ClaimFinalizer holds a deleted claim until its workflow has released its
// service. The admission policy in crds/policies sets it on create.
const ClaimFinalizer = "primaza.io/claim"

// ClaimState is where a ServiceClaim stands.
// +kubebuilder:validation:Enum=Pending;Resolved;Invalid
type ClaimState string

const (
	// ClaimPending: no available RegisteredService matches yet.
	ClaimPending ClaimState = "Pending"
	// ClaimResolved: a RegisteredService is held and its credentials injected.
	ClaimResolved ClaimState = "Resolved"
	// ClaimInvalid: the claim can never be resolved as written.
	ClaimInvalid ClaimState = "Invalid"
)

// ApplicationSelector names the workloads that receive a claim's credentials,
// by name or by label selector.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name or selector must be set"
type ApplicationSelector struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// EnvVar projects one service endpoint definition key into an environment variable.
type EnvVar struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ApplicationClusterContext names the cluster environment and namespace
// of the application a claim is made for.
type ApplicationClusterContext struct {
	// ClusterEnvironmentName is the environment, matched against the
	// services' constraints.
	// +kubebuilder:validation:MinLength=1
	ClusterEnvironmentName string `json:"clusterEnvironmentName"`
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// ClaimTarget is where a claim is made from, as Primaza ships it: an
// environment, or an application's cluster context.
// +kubebuilder:validation:XValidation:rule="has(self.environmentTag) != has(self.applicationClusterContext)",message="target: give exactly one of environmentTag or applicationClusterContext"
type ClaimTarget struct {
	// +optional
	// +kubebuilder:validation:MinLength=1
	EnvironmentTag string `json:"environmentTag,omitempty"`
	// +optional
	ApplicationClusterContext *ApplicationClusterContext `json:"applicationClusterContext,omitempty"`
}

// ServiceClaimSpec asks for a RegisteredService of a class, for an
// application. Where it is made from is given as Primaza ships it
// (target) or as the seed's design has it (environmentTag or
// applicationClusterContext at the top): one of the three.
// +kubebuilder:validation:XValidation:rule="[has(self.target), has(self.environmentTag), has(self.applicationClusterContext)].filter(x, x).size() == 1",message="give exactly one of target (as Primaza ships it), environmentTag or applicationClusterContext (as the seed's design has them)"
type ServiceClaimSpec struct {
	// ServiceClassIdentity must be a subset of the claimed service's identity.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceClassIdentity cannot be changed"
	ServiceClassIdentity []ServiceClassIdentityItem `json:"serviceClassIdentity"`
	// ServiceEndpointDefinitionKeys are the keys the claimed service must provide.
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceEndpointDefinitionKeys cannot be changed"
	ServiceEndpointDefinitionKeys []string `json:"serviceEndpointDefinitionKeys"`
	// EnvironmentTag is the environment the claim is made from; it is matched
	// against the service's constraints.
	// +optional
	EnvironmentTag string `json:"environmentTag,omitempty"`
	// ApplicationClusterContext, instead of environmentTag, names the
	// application's cluster environment (the environment matched) and
	// namespace.
	// +optional
	ApplicationClusterContext *ApplicationClusterContext `json:"applicationClusterContext,omitempty"`
	// Target, instead of environmentTag or applicationClusterContext, says
	// where the claim is made from, as Primaza ships claims.
	// +optional
	Target *ClaimTarget `json:"target,omitempty"`
	// Application is what receives the credentials, projected as
	// servicebinding.io files under $SERVICE_BINDING_ROOT/<claim name>
	// and the variables envs maps.
	// +optional
	Application *ApplicationSelector `json:"application,omitempty"`
	// Envs project endpoint definition keys as environment variables.
	// +optional
	// +listType=map
	// +listMapKey=name
	Envs []EnvVar `json:"envs,omitempty"`
}

// BindingReference names a binding Secret beside the claim.
type BindingReference struct {
	Name string `json:"name"`
}

// ServiceClaimStatus says which service, if any, resolved the claim.
type ServiceClaimStatus struct {
	// +optional
	State ClaimState `json:"state,omitempty"`
	// RegisteredService is the name of the service held.
	// +optional
	RegisteredService string `json:"registeredService,omitempty"`
	// RegisteredServiceUID is the UID of the service held.
	// +optional
	RegisteredServiceUID types.UID `json:"registeredServiceUID,omitempty"`
	// ClaimID identifies the claim, as Primaza writes it: its UID, set
	// when the claim is first resolved or found pending.
	// +optional
	ClaimID string `json:"claimID,omitempty"`
	// Binding names the Secret that holds the service's endpoint values,
	// in servicebinding.io's provisioned-service style.
	// +optional
	Binding *BindingReference `json:"binding,omitempty"`
	// Projected is how many of the application's workloads carry the
	// credentials.
	// +optional
	Projected int `json:"projected,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TargetEnvironmentTag is the claim's environment tag, from target or
// the top.
func (s *ServiceClaimSpec) TargetEnvironmentTag() string {
	if s.Target != nil {
		return s.Target.EnvironmentTag
	}
	return s.EnvironmentTag
}

// TargetContext is the claim's application cluster context, from target
// or the top; nil when it gives an environment tag.
func (s *ServiceClaimSpec) TargetContext() *ApplicationClusterContext {
	if s.Target != nil {
		return s.Target.ApplicationClusterContext
	}
	return s.ApplicationClusterContext
}

// ServiceClaim claims a RegisteredService for an application.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=claim,categories=quartermaster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.status.registeredService`
// +kubebuilder:printcolumn:name="Projected",type=integer,JSONPath=`.status.projected`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceClaimSpec   `json:"spec"`
	Status ServiceClaimStatus `json:"status,omitempty"`
}

// ServiceClaimList is a list of ServiceClaim.
// +kubebuilder:object:root=true
type ServiceClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServiceClaim{}, &ServiceClaimList{})
}
