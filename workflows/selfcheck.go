package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
)

// SelfCheckResult says which of the expected CRDs the worker found established.
type SelfCheckResult struct {
	Established []string `json:"established"`
	Missing     []string `json:"missing,omitempty"`
}

// SelfCheck proves the chain starter → Temporal → worker → Kubernetes works:
// it asks the worker to read the API server and reports which of the wanted
// CRDs are established. `qm dev` runs it once at start-up, so the first
// workflow an operator sees in the UI says whether the system is wired up.
func SelfCheck(ctx workflow.Context, want []string) (SelfCheckResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// One list of CRDs: a worker that takes longer is gone or stuck,
		// and the next attempt may go to another.
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second,
			MaximumAttempts: 5,
		},
	})

	var kube *activities.Kubernetes
	var established []string
	if err := workflow.ExecuteActivity(ctx, kube.EstablishedCRDs).Get(ctx, &established); err != nil {
		return SelfCheckResult{}, fmt.Errorf("reading CRDs from the API server: %w", err)
	}

	res := SelfCheckResult{Established: established}
	for _, name := range want {
		if !slices.Contains(established, name) {
			res.Missing = append(res.Missing, name)
		}
	}
	return res, nil
}
