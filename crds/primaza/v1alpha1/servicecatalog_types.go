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

// ServiceCatalogServiceByLabel is a service that a claim holds for the
// workloads its labels select: more of them may come and use it.
type ServiceCatalogServiceByLabel struct {
	ServiceCatalogService `json:",inline"`
	// Labels select the workloads the claim binds the service to.
	Labels *metav1.LabelSelector `json:"labels"`
}

// ServiceCatalogSpec lists the Available registered services of an
// environment, and those claimed for the workloads a label selector names.
type ServiceCatalogSpec struct {
	// +optional
	// +listType=map
	// +listMapKey=name
	Services []ServiceCatalogService `json:"services,omitempty"`
	// ClaimedByLabels are the services of the environment that a claim
	// holds for the workloads its application's selector matches, with
	// that selector, as Primaza lists them.
	// +optional
	// +listType=map
	// +listMapKey=name
	ClaimedByLabels []ServiceCatalogServiceByLabel `json:"claimedByLabels,omitempty"`
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
