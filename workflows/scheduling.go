package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// scheduleAgain is how long a provision that no cluster can take waits
// before it asks again: a new SFCluster, or room freed on one, is used
// within this long.
const scheduleAgain = 5 * time.Second

// schedule is a provision's first step under a scheduler: it chooses the
// instance's cluster and writes it into the instance before anything is
// applied. While no cluster qualifies the provision waits, in progress and
// saying why, until the plan's maximum_polling_duration. It returns the
// generation the provision then applies, or the outcome it failed with.
func schedule(ctx workflow.Context, s *steps, begun activities.Begun) (int64, activities.Outcome, bool) {
	var a *activities.Scheduling
	// Asks again at the same pace: what it waits for is a change elsewhere.
	again := newBackoff(workflow.Now(ctx).Add(begun.MaxPolling), scheduleAgain, scheduleAgain)
	for {
		var sch activities.Scheduled
		if err := s.run(ctx, "schedule", func(ctx workflow.Context) workflow.Future {
			return workflow.ExecuteLocalActivity(ctx, a.Schedule, s.t, begun.Generation)
		}, &sch); err != nil {
			return 0, failed(s.op, err), false
		}
		if sch.Cluster != "" {
			workflow.SetCurrentDetails(ctx, "")
			return sch.Generation, activities.Outcome{}, true
		}
		workflow.SetCurrentDetails(ctx, "waiting for a cluster: "+sch.Explanation)
		left := again.left(ctx)
		if left <= 0 {
			return 0, activities.Outcome{State: osbv1alpha1.StateFailed, Kind: KindTimeout,
				Description: fmt.Sprintf("no cluster qualified within the plan's maximum_polling_duration of %s: %s", begun.MaxPolling, sch.Explanation)}, false
		}
		if err := again.sleep(ctx, s, left, "wait for a cluster"); err != nil {
			return 0, failed(s.op, err), false
		}
	}
}
