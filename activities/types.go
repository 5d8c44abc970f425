package activities

import (
	"time"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

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
	// Kind says why a failed operation failed (an error type such as
	// TemplateError, or Timeout); the run fails with it as its type.
	Kind string `json:"kind,omitempty"`
}

// DefaultMaxPolling bounds an operation whose plan sets no maximum_polling_duration.
const DefaultMaxPolling = time.Hour
