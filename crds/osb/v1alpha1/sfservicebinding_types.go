package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SFServiceBindingSpec records an OSB bind request.
type SFServiceBindingSpec struct {
	// ID is the OSB binding_id. The object's name is derived from it. Like
	// every OSB ID here it is 1 to 253 printable ASCII characters without
	// spaces (docs/osb.md).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	ID string `json:"id"`
	// InstanceID is the name of the SFServiceInstance the binding belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	InstanceID string `json:"instanceId"`
	// ServiceID is the OSB service_id.
	// +kubebuilder:validation:MinLength=1
	ServiceID string `json:"serviceId"`
	// PlanID is the OSB plan_id.
	// +kubebuilder:validation:MinLength=1
	PlanID string `json:"planId"`
	// BindResource is the OSB bind_resource of the request.
	// +optional
	BindResource *apiextensionsv1.JSON `json:"bindResource,omitempty"`
	// Context is the OSB context object of the request.
	// +optional
	Context *apiextensionsv1.JSON `json:"context,omitempty"`
	// Parameters are the OSB parameters of the request.
	// +optional
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
	// AppGUID is the app the binding is made for: OSB's
	// bind_resource.app_guid (or the deprecated top-level app_guid), as
	// Service Fabrik's broker records it.
	// +optional
	AppGUID string `json:"appGuid,omitempty"`
	// AcceptsIncomplete records whether the client accepts an asynchronous bind.
	// +optional
	AcceptsIncomplete bool `json:"acceptsIncomplete,omitempty"`
	// PredecessorBinding names the SFServiceBinding of the same instance
	// that this one rotates (OSB predecessor_binding_id): its plan must
	// have bindingRotatable, and its templates see the predecessor as
	// .predecessor. The predecessor keeps working until it is unbound.
	// +optional
	PredecessorBinding string `json:"predecessorBinding,omitempty"`
	// Rotation replaces the binding's credentials on a schedule
	// (Quartermaster's own): each rotation binds a successor by the rules
	// of OSB rotation, writes its credentials into this binding's Secret,
	// and unbinds the predecessor once keepFor has passed. It needs a plan
	// with bindingRotatable, and is set when the binding is made or never
	// (the plan's bindingRotation is the default). The annotation
	// quartermaster.io/rotate, set to a new value, rotates at once.
	// +optional
	Rotation *CredentialRotation `json:"rotation,omitempty"`
}

// RotateAnnotation, set to any new value on a rotating binding, rotates
// its credentials at once.
const RotateAnnotation = "quartermaster.io/rotate"

// RotationOfLabel marks the successor bindings a rotating binding made,
// with the rotating binding's UID as its value (a name may be longer than
// a label value).
const RotationOfLabel = "quartermaster.io/rotation-of"

// ConditionRotated says whether a rotating binding's last rotation
// succeeded, and if not, why.
const ConditionRotated = "Rotated"

// CredentialRotation says how often a binding's credentials are replaced,
// and how long the replaced ones stay valid.
// +kubebuilder:validation:XValidation:rule="duration(self.keepFor) < duration(self.every)",message="keepFor must be shorter than every: at most two sets of credentials are valid at once"
// +kubebuilder:validation:XValidation:rule="duration(self.every) >= duration('10s')",message="every must be at least 10s"
type CredentialRotation struct {
	// Every is how long a set of credentials is the current one, e.g. 720h.
	Every metav1.Duration `json:"every"`
	// KeepFor is how long credentials stay valid once replaced, so that
	// every workload moves to the new ones first, e.g. 1h.
	KeepFor metav1.Duration `json:"keepFor"`
}

// RotationStatus is where a rotating binding's rotations stand.
type RotationStatus struct {
	// Generation counts the sets of credentials the binding has had: the
	// current ones are its successor binding of that generation.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Current names the successor SFServiceBinding whose credentials the
	// binding publishes.
	// +optional
	Current string `json:"current,omitempty"`
	// LastRotated is when the current credentials were published.
	// +optional
	LastRotated *metav1.Time `json:"lastRotated,omitempty"`
	// NextRotation is when they are to be replaced.
	// +optional
	NextRotation *metav1.Time `json:"nextRotation,omitempty"`
	// Forced is the last value of the quartermaster.io/rotate annotation
	// that was honoured.
	// +optional
	Forced string `json:"forced,omitempty"`
	// Retiring are the replaced credentials still valid, each until it is
	// unbound.
	// +optional
	// +listType=atomic
	Retiring []RetiringCredentials `json:"retiring,omitempty"`
}

// RetiringCredentials are replaced credentials that stay valid until.
type RetiringCredentials struct {
	// Binding is the successor SFServiceBinding that holds them.
	Binding string `json:"binding"`
	// Until is when it is unbound.
	Until metav1.Time `json:"until"`
}

// BindingResponse is what a bind gave back: where its credentials are, and
// the OSB 2.17 fields beside them, as the plan's status template reported
// them in bind.response. The credentials themselves stay in the Secret.
type BindingResponse struct {
	// SecretRef is the name of the Secret, next to the binding, that holds its credentials.
	// +optional
	SecretRef string `json:"secretRef,omitempty"`
	// Endpoints are the network endpoints the application uses (OSB endpoints).
	// +optional
	// +listType=atomic
	Endpoints []BindingEndpoint `json:"endpoints,omitempty"`
	// VolumeMounts are the OSB volume_mounts, as the template gave them.
	// +optional
	VolumeMounts *apiextensionsv1.JSON `json:"volumeMounts,omitempty"`
	// SyslogDrainURL is the OSB syslog_drain_url.
	// +optional
	SyslogDrainURL string `json:"syslogDrainUrl,omitempty"`
	// RouteServiceURL is the OSB route_service_url.
	// +optional
	RouteServiceURL string `json:"routeServiceUrl,omitempty"`
	// Metadata is the OSB binding metadata: when the credentials expire.
	// +optional
	Metadata *BindingMetadata `json:"metadata,omitempty"`
}

// BindingEndpoint is one OSB endpoint of a binding.
type BindingEndpoint struct {
	// Host is a host name or IP address.
	Host string `json:"host"`
	// Ports are ports or port ranges, e.g. "5432" or "9000-9010".
	// +listType=atomic
	Ports []string `json:"ports"`
	// Protocol is tcp, udp or all (OSB's default: tcp).
	// +optional
	// +kubebuilder:validation:Enum=tcp;udp;all
	Protocol string `json:"protocol,omitempty"`
}

// BindingMetadata is the OSB metadata of a binding.
type BindingMetadata struct {
	// ExpiresAt is when the credentials expire (RFC 3339).
	// +optional
	ExpiresAt string `json:"expiresAt,omitempty"`
	// RenewBefore is when the credentials should be renewed (RFC 3339).
	// +optional
	RenewBefore string `json:"renewBefore,omitempty"`
}

// SFServiceBindingStatus is what a user and the OSB last_operation see.
type SFServiceBindingStatus struct {
	// +optional
	State OperationState `json:"state,omitempty"`
	// +optional
	Description string `json:"description,omitempty"`
	// +optional
	Error string `json:"error,omitempty"`
	// +optional
	Response BindingResponse `json:"response,omitempty"`
	// Resources lists every object the binding's templates applied.
	// +optional
	// +listType=atomic
	Resources []Source `json:"resources,omitempty"`
	// AppliedSpec is the spec of the last operation that succeeded.
	// +optional
	AppliedSpec *SFServiceBindingSpec `json:"appliedSpec,omitempty"`
	// Binding names the Secret of the credentials, as servicebinding.io's
	// Provisioned Services publish it, so that a ServiceBinding can name the
	// SFServiceBinding as its service. Absent while there are no
	// credentials, and for a binding whose credentials live in another
	// cluster.
	// +optional
	Binding *SecretReference `json:"binding,omitempty"`
	// ClusterID is the cluster the binding's objects and credentials live
	// in, its instance's spec.clusterId, kept so that an unbind finds them
	// once the instance is gone. Empty: the cluster Quartermaster runs in.
	// +optional
	ClusterID string `json:"clusterId,omitempty"`
	// Rotation is set on a binding whose credentials rotate: it publishes
	// those of a successor binding, replaced on a schedule.
	// +optional
	Rotation *RotationStatus `json:"rotation,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	Name string `json:"name"`
}

// SFServiceBinding is one binding of an SFServiceInstance.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfsb,categories=quartermaster
// +kubebuilder:validation:XValidation:rule=`(has(self.spec.predecessorBinding) ? self.spec.predecessorBinding : "") == (has(oldSelf.spec.predecessorBinding) ? oldSelf.spec.predecessorBinding : "")`,message="spec.predecessorBinding is immutable"
// +kubebuilder:validation:XValidation:rule=`has(self.spec.rotation) == has(oldSelf.spec.rotation)`,message="spec.rotation is set when the binding is made, or never: a binding that rotates publishes a successor's credentials, and one made without it holds its own"
// +kubebuilder:printcolumn:name="Rotated",type=date,JSONPath=`.status.rotation.lastRotated`,priority=1
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.spec.instanceId`
// +kubebuilder:printcolumn:name="Predecessor",type=string,JSONPath=`.spec.predecessorBinding`,priority=1
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.response.secretRef`,priority=1
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.conditions[?(@.type=="Started")].message`,description="why the operation's run cannot start, while it cannot (the Started=False condition)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SFServiceBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SFServiceBindingSpec   `json:"spec"`
	Status SFServiceBindingStatus `json:"status,omitempty"`
}

// SFServiceBindingList is a list of SFServiceBinding.
// +kubebuilder:object:root=true
type SFServiceBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SFServiceBinding `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SFServiceBinding{}, &SFServiceBindingList{})
}
