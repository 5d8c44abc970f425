package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceCatalogService is one class of service that can be claimed now.
type ServiceCatalogService struct {
	// Name is the name of the RegisteredService.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +listType=map
	// +listMapKey=name
	ServiceClassIdentity []ServiceClassIdentityItem `json:"serviceClassIdentity"`
	// ServiceEndpointDefinitionKeys are the keys the service provides, without values.
	// +listType=set
	ServiceEndpointDefinitionKeys []string `json:"serviceEndpointDefinitionKeys"`
}

// ServiceCatalogSpec lists the Available registered services of an environment.
type ServiceCatalogSpec struct {
	// +optional
	// +listType=map
	// +listMapKey=name
	Services []ServiceCatalogService `json:"services,omitempty"`
}

// ServiceCatalogStatus is what Quartermaster observed when it last wrote the catalog.
type ServiceCatalogStatus struct {
	// ServiceCount is the number of services listed.
	// +optional
	ServiceCount int32 `json:"serviceCount,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceCatalog lists the registered services that can be claimed, without credentials.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=quartermaster
// +kubebuilder:printcolumn:name="Services",type=integer,JSONPath=`.status.serviceCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceCatalogSpec   `json:"spec,omitempty"`
	Status ServiceCatalogStatus `json:"status,omitempty"`
}

// ServiceCatalogList is a list of ServiceCatalog.
// +kubebuilder:object:root=true
type ServiceCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceCatalog `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServiceCatalog{}, &ServiceCatalogList{})
}
