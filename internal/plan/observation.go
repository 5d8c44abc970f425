package plan

import (
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// Observation is what a status template's word on a running operation
// means: the outcome to report, and what to write because of it. Deciding
// it is pure (Status.Decide); the worker's Observe step then writes it.
type Observation struct {
	State                            osbv1alpha1.OperationState
	Description, Error, DashboardURL string
	InstanceUsable, UpdateRepeatable *bool
	// Credentials is the response of a bind that succeeded, to be stored
	// in the binding's Secret; nil otherwise.
	Credentials *BindResponse
	// Metadata is the instance's OSB metadata, to be recorded, for a
	// provision or an update whose status gives it.
	Metadata *osbv1alpha1.InstanceMetadata
	// Progress is what to show of an operation still under way (its
	// description); empty when there is nothing to show.
	Progress string
}

// Decide says what s means for the operation op: its outcome, with the
// dashboard URL that the registry keeps (savedDashboard) when s names
// none; a bind that succeeded stores its response; a provision or an
// update records the metadata s gives; an operation under way shows its
// description. A bind response that does not decode is a *TemplateError.
func (s *Status) Decide(op lifecycle.Operation, savedDashboard string) (Observation, error) {
	o := Observation{
		State:            osbv1alpha1.OperationState(s.State),
		Description:      s.Description,
		Error:            s.Error,
		DashboardURL:     s.DashboardURL,
		InstanceUsable:   s.InstanceUsable,
		UpdateRepeatable: s.UpdateRepeatable,
	}
	if o.DashboardURL == "" {
		o.DashboardURL = savedDashboard
	}
	if op == lifecycle.OpBind && o.State == osbv1alpha1.StateSucceeded {
		response, err := DecodeBindResponse(s.Response)
		if err != nil {
			return Observation{}, err
		}
		o.Credentials = response
	}
	if op == lifecycle.OpProvision || op == lifecycle.OpUpdate {
		o.Metadata = s.Metadata
	}
	if o.State == osbv1alpha1.StateInProgress {
		o.Progress = s.Description
	}
	return o, nil
}
