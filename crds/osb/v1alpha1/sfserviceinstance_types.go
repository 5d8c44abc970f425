package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionProtectionAnnotation, "true" on an SFServiceInstance, has the API
// server refuse its deletion (crds/policies/deletion-protection.yaml) and
// the OSB API its deprovision, until it is removed.
const DeletionProtectionAnnotation = "quartermaster.io/deletion-protection"

// DeprovisionInUseAnnotation, "true" on an SFServiceInstance, lets its
// deprovision delete the instance's bindings (each then unbound by its own
// run) instead of waiting for its users to go. The OSB API sets it as it
// deprovisions, as a platform has unbound first.
const DeprovisionInUseAnnotation = "quartermaster.io/deprovision-in-use"

// ConditionInUse, True on an instance being deleted, says that its
// deprovision waits for its users to go; its message names them.
const ConditionInUse = "InUse"

// ConditionDrifted, True on an instance, says that objects its last
// operation applied differ from what the API server holds (a plan's
// spec.drift); its message names the objects and fields.
const ConditionDrifted = "Drifted"

// Protected reports whether the instance is protected from deletion.
func (in *SFServiceInstance) Protected() bool {
	return in.Annotations[DeletionProtectionAnnotation] == "true"
}

// SFServiceInstanceSpec records an OSB provision or update request.
type SFServiceInstanceSpec struct {
	// InstanceID is the OSB instance_id. The object's name is derived from it.
	// Like every OSB ID here it is 1 to 253 printable ASCII characters
	// without spaces (docs/osb.md).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	InstanceID string `json:"instanceId,omitempty"`
	// ServiceID is the OSB service_id.
	// +kubebuilder:validation:MinLength=1
	ServiceID string `json:"serviceId"`
	// PlanID is the OSB plan_id.
	// +kubebuilder:validation:MinLength=1
	PlanID string `json:"planId"`
	// Context is the OSB context object of the request.
	// +optional
	Context *apiextensionsv1.JSON `json:"context,omitempty"`
	// +optional
	OrganizationGUID string `json:"organizationGuid,omitempty"`
	// +optional
	SpaceGUID string `json:"spaceGuid,omitempty"`
	// Parameters are the OSB parameters of the request.
	// +optional
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
	// PreviousValues is the OSB previous_values of an update request.
	// +optional
	PreviousValues *apiextensionsv1.JSON `json:"previousValues,omitempty"`
	// MaintenanceInfo is the OSB maintenance_info the instance is asked to run with.
	// +optional
	MaintenanceInfo *MaintenanceInfo `json:"maintenance_info,omitempty"`
	// ClusterID is the name of the SFCluster the instance is scheduled on.
	// +optional
	ClusterID string `json:"clusterId,omitempty"`
	// Metadata is the instance's OSB metadata as its author gives it
	// (Service Fabrik keeps it in the spec). The OSB API serves it where
	// the plan's status template reports none (status.metadata).
	// +optional
	Metadata *InstanceMetadata `json:"metadata,omitempty"`
}

// ServedMetadata is the OSB metadata the API serves of an instance: what
// its status template reported, else what its spec gives.
func (i *SFServiceInstance) ServedMetadata() *InstanceMetadata {
	if i.Status.Metadata != nil {
		return i.Status.Metadata
	}
	return i.Spec.Metadata
}

// SFServiceInstanceStatus is what a user and the OSB last_operation see.
type SFServiceInstanceStatus struct {
	// State of the operation last requested.
	// +optional
	State OperationState `json:"state,omitempty"`
	// +optional
	Description string `json:"description,omitempty"`
	// +optional
	Error string `json:"error,omitempty"`
	// +optional
	DashboardURL string `json:"dashboardUrl,omitempty"`
	// Metadata is the OSB metadata of the instance (labels and
	// attributes), as the plan's status template last reported it for a
	// provision or an update.
	// +optional
	Metadata *InstanceMetadata `json:"metadata,omitempty"`
	// InstanceUsable is the OSB instance_usable of a failed update or deprovision.
	// +optional
	InstanceUsable *bool `json:"instanceUsable,omitempty"`
	// UpdateRepeatable is the OSB update_repeatable of a failed update.
	// +optional
	UpdateRepeatable *bool `json:"updateRepeatable,omitempty"`
	// Resources lists every object the instance's templates applied.
	// +optional
	// +listType=atomic
	Resources []Source `json:"resources,omitempty"`
	// AppliedSpec is the spec of the last operation that succeeded.
	// +optional
	AppliedSpec *SFServiceInstanceSpec `json:"appliedSpec,omitempty"`
	// AppliedPlanGeneration is the generation of the plan the last
	// provision or update that succeeded rendered: a mass update skips an
	// instance already current.
	// +optional
	AppliedPlanGeneration int64 `json:"appliedPlanGeneration,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InstanceMetadata is OSB's metadata of a service instance: what a
// platform shows of it.
type InstanceMetadata struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// SFServiceInstance is one service instance, created by the OSB API or by kubectl.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfsi,categories=quartermaster
// +kubebuilder:selectablefield:JSONPath=`.spec.serviceId`
// +kubebuilder:selectablefield:JSONPath=`.spec.planId`
// +kubebuilder:selectablefield:JSONPath=`.spec.clusterId`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.metadata.generation`,description="the generation of the spec"
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,description="the generation the state is about: lower than Generation while a change is pending"
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceId`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.planId`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterId`,priority=1
// +kubebuilder:printcolumn:name="Description",type=string,JSONPath=`.status.description`,priority=1
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.conditions[?(@.type=="Started")].message`,description="why the operation's run cannot start, while it cannot (the Started=False condition)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SFServiceInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SFServiceInstanceSpec   `json:"spec"`
	Status SFServiceInstanceStatus `json:"status,omitempty"`
}

// SFServiceInstanceList is a list of SFServiceInstance.
// +kubebuilder:object:root=true
type SFServiceInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SFServiceInstance `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SFServiceInstance{}, &SFServiceInstanceList{})
}

// OSBID is the instance's ID in the OSB API: spec.instanceId, or its name
// for an instance created with kubectl without one.
func (in *SFServiceInstance) OSBID() string {
	if in.Spec.InstanceID != "" {
		return in.Spec.InstanceID
	}
	return in.Name
}
