package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/quartermaster/qm/internal/versioning"
)

// Build is one version of the worker deployment, as `qm builds` lists it.
type Build struct {
	ID string
	// Routing is "current", "ramping N%" or "" (not routed to).
	Routing string
	// Pinned is the count of open runs pinned to the build.
	Pinned int64
	// Revision is the release revision that last made it current (0: none).
	Revision int
	Created  time.Time
}

// Builds lists the deployment's versions, newest first, and says where the
// unversioned workers stand ("current" when the deployment routes to them).
// dc reads the builds' metadata: the data converter c was made with (nil:
// the default).
func Builds(ctx context.Context, c client.Client, deployment string, dc converter.DataConverter) (builds []Build, unversioned string, err error) {
	h := c.WorkerDeploymentClient().GetHandle(deployment)
	d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, "", fmt.Errorf("no worker deployment %s: no versioned worker of it has polled yet (qm dev, and the chart with worker.versioning.enabled=false, run unversioned workers, which have no builds)", deployment)
	}
	if err != nil {
		return nil, "", fmt.Errorf("describing the worker deployment %s: %w", deployment, err)
	}
	rc := d.Info.RoutingConfig
	if rc.CurrentVersion == nil {
		unversioned = "current"
	}
	for _, sum := range d.Info.VersionSummaries {
		b := Build{ID: sum.Version.BuildID, Created: sum.CreateTime}
		switch {
		case rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == b.ID:
			b.Routing = "current"
		case rc.RampingVersion != nil && rc.RampingVersion.BuildID == b.ID:
			b.Routing = fmt.Sprintf("ramping %g%%", rc.RampingVersionPercentage)
		}
		var revs []int
		if revs, err = appendRevision(ctx, h, b.ID, nil, dc); err != nil {
			return nil, "", err
		}
		if len(revs) > 0 {
			b.Revision = revs[0]
		}
		if err := versioning.Check(deployment, b.ID); err == nil {
			n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: versioning.PinnedQuery(deployment, b.ID)})
			if err != nil {
				return nil, "", fmt.Errorf("counting the runs pinned to build %s: %w", b.ID, err)
			}
			b.Pinned = n.GetCount()
		}
		builds = append(builds, b)
	}
	slices.SortFunc(builds, func(a, b Build) int { return b.Created.Compare(a.Created) })
	return builds, unversioned, nil
}
