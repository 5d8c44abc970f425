package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TemplateAction is the operation a plan template serves.
// +kubebuilder:validation:Enum=provision;bind;unbind;sources;status;clusterSelector
type TemplateAction string

const (
	ActionProvision       TemplateAction = "provision"
	ActionBind            TemplateAction = "bind"
	ActionUnbind          TemplateAction = "unbind"
	ActionSources         TemplateAction = "sources"
	ActionStatus          TemplateAction = "status"
	ActionClusterSelector TemplateAction = "clusterSelector"
)

// TemplateType is the engine that renders a plan template.
// +kubebuilder:validation:Enum=gotemplate;helm
type TemplateType string

const (
	TemplateGo   TemplateType = "gotemplate"
	TemplateHelm TemplateType = "helm"
)

// TemplateSpec is one template of a plan. Its body comes from exactly one of
// url, content and contentEncoded.
// +kubebuilder:validation:XValidation:rule="[has(self.url), has(self.content), has(self.contentEncoded)].filter(x, x).size() == 1",message="exactly one of url, content or contentEncoded must be set"
type TemplateSpec struct {
	Action TemplateAction `json:"action"`
	Type   TemplateType   `json:"type"`
	// URL is where the template (or, for helm, the chart archive) is fetched from.
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url,omitempty"`
	// Content is the template in line.
	// +optional
	Content string `json:"content,omitempty"`
	// ContentEncoded is the template, or for helm a chart .tgz, in base64.
	// +optional
	ContentEncoded string `json:"contentEncoded,omitempty"`
}

// MaintenanceInfo is the OSB maintenance_info of a plan.
type MaintenanceInfo struct {
	// Version is a semantic version.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// +optional
	Description string `json:"description,omitempty"`
}

// ManagerSpec says how Quartermaster runs a plan's operations. Service
// Fabrik's manager is free-form: any other field it carries is kept as
// written, and Quartermaster reads none of them.
// +kubebuilder:pruning:PreserveUnknownFields
type ManagerSpec struct {
	// Async makes provision, update and deprovision asynchronous OSB operations.
	// +optional
	Async bool `json:"async,omitempty"`
	// AsyncBinding makes bind and unbind asynchronous OSB operations.
	// +optional
	AsyncBinding bool `json:"asyncBinding,omitempty"`
	// RequiresApp refuses OSB bind requests without bind_resource.app_guid
	// (the OSB RequiresApp error): the plan's bindings are made for an app.
	// +optional
	RequiresApp bool `json:"requiresApp,omitempty"`
}

// SFPlanSpec is an OSB plan, as served by /v2/catalog, plus the templates
// that map each OSB action to Kubernetes resources.
// +kubebuilder:validation:XValidation:rule="!has(self.bindingRotation) || (has(self.bindingRotatable) && self.bindingRotatable)",message="bindingRotation needs bindingRotatable: true"
type SFPlanSpec struct {
	// Name is the OSB plan name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// ID is the OSB plan_id.
	// +kubebuilder:validation:MinLength=1
	ID string `json:"id"`
	// +kubebuilder:validation:MinLength=1
	Description string `json:"description"`
	// ServiceID is the OSB service_id of the SFService this plan belongs to.
	// +kubebuilder:validation:MinLength=1
	ServiceID string `json:"serviceId"`
	// Metadata is the OSB plan metadata, served as given.
	// +optional
	Metadata *apiextensionsv1.JSON `json:"metadata,omitempty"`
	// +optional
	Free *bool `json:"free,omitempty"`
	// +optional
	Bindable *bool `json:"bindable,omitempty"`
	// PlanUpdatable is served as the OSB plan_updateable.
	// +optional
	PlanUpdatable *bool `json:"planUpdatable,omitempty"`
	// BindingRotatable lets a new binding name an existing one as its
	// predecessor and get fresh credentials while the predecessor keeps
	// working (OSB binding rotation). Served as the OSB binding_rotatable;
	// false unless set.
	// +optional
	BindingRotatable *bool `json:"bindingRotatable,omitempty"`
	// BindingRotation is the rotation of the plan's bindings that set
	// none (SFServiceBinding spec.rotation), made after it is set:
	// Quartermaster's own. It needs bindingRotatable.
	// +optional
	BindingRotation *CredentialRotation `json:"bindingRotation,omitempty"`
	// AutoUpdateInstances re-renders every instance of the plan when the
	// plan's spec changes: a MassUpdate run per generation, with MassUpdate's
	// settings.
	// +optional
	AutoUpdateInstances bool `json:"autoUpdateInstances,omitempty"`
	// MassUpdate tunes the runs that bring the plan's instances along.
	// +optional
	MassUpdate *MassUpdateSettings `json:"massUpdate,omitempty"`
	// +optional
	MaintenanceInfo *MaintenanceInfo `json:"maintenance_info,omitempty"`
	// DeletionProtection protects the plan's new instances from deletion:
	// each gets the annotation quartermaster.io/deletion-protection "true"
	// as it is provisioned, unless its creator set the annotation already
	// (to "false", say). Quartermaster's own.
	// +optional
	DeletionProtection bool `json:"deletionProtection,omitempty"`
	// Drift has the objects of the plan's instances compared, every so
	// often, with what their last operation applied, and a difference
	// reported or repaired (Quartermaster's own; unset: never checked).
	// +optional
	Drift *DriftSettings `json:"drift,omitempty"`
	// MaxInstances is how many instances of the plan may exist at once, in
	// every namespace (Quartermaster's own; unset: no limit). The OSB API
	// refuses a provision beyond it with 403, and a provision that passes
	// the API fails with a description that names the limit. Every instance
	// counts until it is deleted.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxInstances *int32 `json:"maxInstances,omitempty"`
	// MaximumPollingDuration is how long, in seconds, an operation may stay in progress.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaximumPollingDuration *int64 `json:"maximum_polling_duration,omitempty"`
	// Schemas are the OSB JSON schemas for instance and binding parameters.
	// +optional
	Schemas *apiextensionsv1.JSON `json:"schemas,omitempty"`
	// +optional
	Manager *ManagerSpec `json:"manager,omitempty"`
	// Context is handed to the templates as .plan.spec.context. It is never served to OSB clients.
	// +optional
	Context *apiextensionsv1.JSON `json:"context,omitempty"`
	// +optional
	// +listType=atomic
	Templates []TemplateSpec `json:"templates,omitempty"`
	// ServiceAccountName is a ServiceAccount of the plan's namespace that
	// the plan's objects are applied as (impersonated), so that Kubernetes'
	// RBAC decides what the plan may do. A plan outside the catalog
	// namespaces always acts as one: this, or quartermaster-plans. A
	// catalog plan that names none acts with the worker's own rights.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// MassUpdateSettings tune a mass update of a plan's instances.
type MassUpdateSettings struct {
	// Concurrency is the most updates in flight at once (default 10).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Concurrency int `json:"concurrency,omitempty"`
	// MaxFailures pauses the run once this many updates failed: a count
	// ("5") or a percentage of the instances ("10%"). Default: none.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:Pattern=`^[0-9]+%?$`
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
}

// DriftAction is what a check does on finding drift.
// +kubebuilder:validation:Enum=report;repair
type DriftAction string

// The drift actions.
const (
	// DriftReport records the drift (condition Drifted, an Event, the
	// metric qm_drift_total) and leaves the objects as they are.
	DriftReport DriftAction = "report"
	// DriftRepair records it too, and starts a Repair run that applies
	// the objects again as the last operation rendered them.
	DriftRepair DriftAction = "repair"
)

// DriftSettings say how often a plan's instances are checked for drift
// and what a check does on finding it.
type DriftSettings struct {
	// Every is the time between two checks of an instance, e.g. "10m"
	// (default ten minutes; at least a second).
	// +optional
	Every *metav1.Duration `json:"every,omitempty"`
	// Action is report (the default) or repair.
	// +optional
	Action DriftAction `json:"action,omitempty"`
}

// SFPlanStatus is what Quartermaster observed of an SFPlan.
type SFPlanStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SpecHash is a digest of the spec last observed, as Service Fabrik
	// records it: it changes exactly when what the plan means changes.
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SFPlan registers one OSB plan of an SFService.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfp,categories=quartermaster
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="ID",type=string,JSONPath=`.spec.id`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceId`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SFPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SFPlanSpec   `json:"spec"`
	Status SFPlanStatus `json:"status,omitempty"`
}

// SFPlanList is a list of SFPlan.
// +kubebuilder:object:root=true
type SFPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SFPlan `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SFPlan{}, &SFPlanList{})
}
