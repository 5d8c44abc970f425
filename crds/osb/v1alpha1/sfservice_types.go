package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DashboardClient is the OSB dashboard_client of a service offering.
type DashboardClient struct {
	// +optional
	ID string `json:"id,omitempty"`
	// +optional
	Secret string `json:"secret,omitempty"`
	// RedirectURI is OSB's redirect_uri. Service Fabrik spells it
	// redirectUri; either is served, this one first.
	// +optional
	RedirectURI string `json:"redirectURI,omitempty"`
	// RedirectUri is Service Fabrik's spelling of RedirectURI.
	// +optional
	RedirectUri string `json:"redirectUri,omitempty"`
}

// RedirectTo is the client's redirect URI, whichever spelling sets it.
func (d *DashboardClient) RedirectTo() string {
	if d.RedirectURI != "" {
		return d.RedirectURI
	}
	return d.RedirectUri
}

// SFServiceSpec is an OSB service offering, as served by /v2/catalog, plus the
// context handed to the plan templates.
type SFServiceSpec struct {
	// Name is the OSB service name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// ID is the OSB service_id.
	// +kubebuilder:validation:MinLength=1
	ID string `json:"id"`
	// +kubebuilder:validation:MinLength=1
	Description string `json:"description"`
	// +optional
	Tags []string `json:"tags,omitempty"`
	// +optional
	Requires []string `json:"requires,omitempty"`
	Bindable bool     `json:"bindable"`
	// +optional
	InstancesRetrievable bool `json:"instancesRetrievable,omitempty"`
	// +optional
	BindingsRetrievable bool `json:"bindingsRetrievable,omitempty"`
	// InstanceRetrievable is Service Fabrik's spelling of
	// InstancesRetrievable; either served true makes it so.
	// +optional
	InstanceRetrievable bool `json:"instanceRetrievable,omitempty"`
	// BindingRetrievable is Service Fabrik's spelling of
	// BindingsRetrievable; either served true makes it so.
	// +optional
	BindingRetrievable bool `json:"bindingRetrievable,omitempty"`
	// +optional
	AllowContextUpdates bool `json:"allowContextUpdates,omitempty"`
	// Metadata is the OSB service metadata, served as given.
	// +optional
	Metadata *apiextensionsv1.JSON `json:"metadata,omitempty"`
	// +optional
	DashboardClient *DashboardClient `json:"dashboardClient,omitempty"`
	// PlanUpdatable is served as the OSB plan_updateable.
	// +optional
	PlanUpdatable bool `json:"planUpdatable,omitempty"`
	// Context is handed to every template of the service's plans as .service.spec.context.
	// It is never served to OSB clients.
	// +optional
	Context *apiextensionsv1.JSON `json:"context,omitempty"`
}

// SFServiceStatus is what Quartermaster observed of an SFService.
type SFServiceStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SFService registers one OSB service offering.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfs,categories=quartermaster
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="ID",type=string,JSONPath=`.spec.id`
// +kubebuilder:printcolumn:name="Bindable",type=boolean,JSONPath=`.spec.bindable`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SFService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SFServiceSpec   `json:"spec"`
	Status SFServiceStatus `json:"status,omitempty"`
}

// SFServiceList is a list of SFService.
// +kubebuilder:object:root=true
type SFServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SFService `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SFService{}, &SFServiceList{})
}
