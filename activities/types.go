package activities

import (
	"time"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Kind is the kind of resource an operation works on.
type Kind string

const (
	KindInstance Kind = "SFServiceInstance"
	KindBinding  Kind = "SFServiceBinding"
)

// Operation is what is being done to an instance or binding. The names are
// the keys of a plan's status template.
type Operation string

const (
	OpProvision   Operation = "provision"
	OpUpdate      Operation = "update"
	OpDeprovision Operation = "deprovision"
	OpBind        Operation = "bind"
	OpUnbind      Operation = "unbind"
)

// Removes reports whether the operation takes its target away.
func (o Operation) Removes() bool { return o == OpDeprovision || o == OpUnbind }

// Target names the instance or binding an operation works on. It carries
// names only: workflow histories never hold parameters or credentials.
type Target struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Begun is what the workflow learns when an operation starts.
type Begun struct {
	// Done is set when the operation has already been carried out for this
	// generation (a repeated start): the workflow has nothing to do.
	Done bool `json:"done,omitempty"`
	// Generation is the spec generation the operation works on.
	Generation int64 `json:"generation"`
	// MaxPolling is the plan's maximum_polling_duration.
	MaxPolling time.Duration `json:"maxPolling"`
}

// Outcome is the state an operation reached, as written to the status.
type Outcome struct {
	State            osbv1alpha1.OperationState `json:"state"`
	Description      string                     `json:"description,omitempty"`
	Error            string                     `json:"error,omitempty"`
	DashboardURL     string                     `json:"dashboardUrl,omitempty"`
	InstanceUsable   *bool                      `json:"instanceUsable,omitempty"`
	UpdateRepeatable *bool                      `json:"updateRepeatable,omitempty"`
}

// Error types that retrying cannot fix. Activities fail with them as
// non-retryable application errors; the workflow turns them into a failed
// state whose description is the error message.
const (
	ErrTemplate = "TemplateError"
	ErrPlan     = "PlanError"
	ErrApply    = "ApplyError"
	ErrGone     = "TargetGone"
)

// DefaultMaxPolling bounds an operation whose plan sets no maximum_polling_duration.
const DefaultMaxPolling = time.Hour

// CredentialsJSONKeysAnnotation lists, comma-separated, the keys of a
// credentials Secret whose values are JSON (numbers, objects, lists) rather
// than plain strings.
const CredentialsJSONKeysAnnotation = "quartermaster.io/json-keys"
