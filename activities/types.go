package activities

import (
	"encoding/json"
	"fmt"
	"time"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Begun is what the workflow learns when an operation starts.
type Begun struct {
	// Done is set when the operation has already been carried out for this
	// generation (a repeated start), or has no more to do (its resource is
	// being deleted): the workflow has nothing to do.
	Done bool `json:"done,omitempty"`
	// Generation is the spec generation the operation works on; when Done,
	// the one the status says was carried out (0: none).
	Generation int64 `json:"generation"`
	// MaxPolling is the plan's maximum_polling_duration.
	MaxPolling time.Duration `json:"maxPolling"`
	// NoUnbindTemplate is set for an unbind whose plan has no unbind
	// template: the workflow has nothing to apply.
	NoUnbindTemplate bool `json:"noUnbindTemplate,omitempty"`
	// Schedule is set for a provision whose instance has no cluster yet,
	// under a scheduler that chooses one: the workflow schedules first.
	Schedule bool `json:"schedule,omitempty"`
	// Service and Plan are the OSB IDs of the target's plan: the labels of
	// the operation's metrics.
	Service string `json:"service,omitempty"`
	Plan    string `json:"plan,omitempty"`
	// Rotates is set for a binding whose credentials rotate
	// (rotation.Front): its bind publishes a successor's credentials, and
	// its unbind takes its successors away. RotationGeneration is the
	// generation it publishes already.
	Rotates            bool  `json:"rotates,omitempty"`
	RotationGeneration int64 `json:"rotationGeneration,omitempty"`
}

// Scheduled is the outcome of a scheduling step.
type Scheduled struct {
	// Cluster is the cluster chosen; "" while none qualifies.
	Cluster string `json:"cluster,omitempty"`
	// Explanation says why, cluster by cluster.
	Explanation string `json:"explanation"`
	// Generation is the instance's generation after the decision was
	// written into its spec: the generation the provision applies.
	Generation int64 `json:"generation,omitempty"`
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
	// Warnings are what the plan's author should hear of its output: parts
	// ignored that are likely a mistake (an unnamed source of a binding).
	Warnings []string `json:"warnings,omitempty"`
}

// DefaultMaxPolling bounds an operation whose plan sets no maximum_polling_duration.
const DefaultMaxPolling = time.Hour

// MarshalJSON writes maxPolling as a duration ("10m0s"), which is how an
// operator reads it in a run's history.
func (b Begun) MarshalJSON() ([]byte, error) {
	type plain Begun
	return json.Marshal(struct {
		plain
		MaxPolling string `json:"maxPolling"`
	}{plain(b), b.MaxPolling.String()})
}

// UnmarshalJSON reads maxPolling as a duration, or as the nanoseconds that
// the histories of older runs hold.
func (b *Begun) UnmarshalJSON(raw []byte) error {
	type plain Begun
	var v struct {
		plain
		MaxPolling json.RawMessage `json:"maxPolling"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	*b = Begun(v.plain)
	switch {
	case len(v.MaxPolling) == 0 || string(v.MaxPolling) == "null":
		return nil
	case v.MaxPolling[0] == '"':
		var s string
		if err := json.Unmarshal(v.MaxPolling, &s); err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("maxPolling: %w", err)
		}
		b.MaxPolling = d
	default:
		var n int64
		if err := json.Unmarshal(v.MaxPolling, &n); err != nil {
			return fmt.Errorf("maxPolling: %w", err)
		}
		b.MaxPolling = time.Duration(n)
	}
	return nil
}
