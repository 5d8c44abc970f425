package activities

import (
	"context"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/massupdate"
)

// MassUpdates holds the activities of the MassUpdate workflow; the
// updates themselves are the instances' own Update runs.
type MassUpdates struct {
	Client    ctrlclient.Client
	Offerings Offerings
}

// SelectInstances lists the instances a run updates now, and counts those
// already current.
func (m *MassUpdates) SelectInstances(ctx context.Context, sel massupdate.Selector) (massupdate.Selection, error) {
	return massupdate.Select(ctx, m.Client, m.Offerings, sel)
}
