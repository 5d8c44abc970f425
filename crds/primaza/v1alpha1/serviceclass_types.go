package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ValueSource is a constant, or a JSONPath into the resource that gives
// the value. Exactly one is set.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
type ValueSource struct {
	// +optional
	Constant *string `json:"constant,omitempty"`
	// JSONPath is evaluated on the resource, e.g. {.spec.credentials.name}
	// or .spec.credentials.name.
	// +optional
	JSONPath *string `json:"jsonPath,omitempty"`
}

// ResourceFieldMapping takes one endpoint value from a field of the
// resource.
type ResourceFieldMapping struct {
	// Name is the key of the endpoint definition.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// JSONPath says where the value lives in the resource; it must resolve
	// to one value.
	// +kubebuilder:validation:MinLength=1
	JSONPath string `json:"jsonPath"`
	// Secret keeps the value in a Secret that the RegisteredService refers
	// to, never in the RegisteredService in clear (the default, as in
	// Primaza).
	// +optional
	// +kubebuilder:default=true
	Secret *bool `json:"secret,omitempty"`
}

// SecretRefFieldMapping takes one endpoint value from a key of a Secret the
// resource links to.
type SecretRefFieldMapping struct {
	// Name is the key of the endpoint definition.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// SecretName is the name of the linked Secret, in the resource's
	// namespace.
	SecretName ValueSource `json:"secretName"`
	// SecretKey is the key of that Secret whose value is taken.
	SecretKey ValueSource `json:"secretKey"`
}

// ServiceEndpointDefinitionMappings say how a resource's endpoint
// definition is made.
type ServiceEndpointDefinitionMappings struct {
	// +optional
	// +listType=map
	// +listMapKey=name
	ResourceFields []ResourceFieldMapping `json:"resourceFields,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	SecretRefFields []SecretRefFieldMapping `json:"secretRefFields,omitempty"`
}

// ServiceClassResource is the kind of resource a class registers.
type ServiceClassResource struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// FieldSelector narrows the class to the resources whose fields match,
	// in kubectl's --field-selector syntax over JSON field paths
	// (spec.serviceId=ID,status.state!=failed). Quartermaster's own: a
	// class over its SFServiceInstances registers one service's instances,
	// not every instance in the namespace. Empty: every resource.
	// +optional
	FieldSelector string `json:"fieldSelector,omitempty"`
	// ServiceEndpointDefinitionMappings give each RegisteredService its
	// endpoint definition.
	ServiceEndpointDefinitionMappings ServiceEndpointDefinitionMappings `json:"serviceEndpointDefinitionMappings"`
}

// ServiceClassCheckContainer is Primaza's container check of a class: a
// command run by a shell in an image.
type ServiceClassCheckContainer struct {
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Command is run as `sh -c COMMAND`.
	// +kubebuilder:validation:MinLength=1
	Command string `json:"command"`
}

// ServiceClassHealthCheck is the health check every RegisteredService of
// the class gets.
type ServiceClassHealthCheck struct {
	Container ServiceClassCheckContainer `json:"container"`
}

// ServiceClassSpec says which resources are services of the class, and how
// each becomes a RegisteredService.
type ServiceClassSpec struct {
	// Resource is the kind of resource, in the class's namespace, that
	// is registered.
	Resource ServiceClassResource `json:"resource"`
	// ServiceClassIdentity is every RegisteredService's class identity.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	ServiceClassIdentity []ServiceClassIdentityItem `json:"serviceClassIdentity"`
	// Constraints are every RegisteredService's constraints.
	// +optional
	Constraints *Constraints `json:"constraints,omitempty"`
	// HealthCheck is every RegisteredService's health check.
	// +optional
	HealthCheck *ServiceClassHealthCheck `json:"healthCheck,omitempty"`
}

// ServiceClassStatus says whether the class's resources are registered.
type ServiceClassStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Services is how many RegisteredServices the class keeps.
	// +optional
	Services int32 `json:"services,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceClass registers services from the resources they run as: for
// each resource of spec.resource's kind in its namespace, a
// RegisteredService that follows it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=quartermaster
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.resource.kind`
// +kubebuilder:printcolumn:name="Services",type=integer,JSONPath=`.status.services`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceClassSpec   `json:"spec"`
	Status ServiceClassStatus `json:"status,omitempty"`
}

// ServiceClassList is a list of ServiceClasses.
// +kubebuilder:object:root=true
type ServiceClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServiceClass{}, &ServiceClassList{})
}
