package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/internal/versioning"
	"github.com/quartermaster/qm/workflows/runs"
)

// Versioning puts the worker in one version of the installation's worker
// deployment (Temporal's Worker Versioning); docs/upgrades.md says how
// releases are handed over with it.
type Versioning struct {
	// Deployment names the installation's worker deployment, in the
	// Temporal namespace the worker's client works in, Namespace (""
	// means "default").
	Deployment, Namespace string
	// BuildID names the release's build (the chart: the image's tag).
	// Empty: the worker is unversioned, and takes every run.
	BuildID string
	// Revision is the release revision the worker runs for: a worker of a
	// revision newer than any that made a version current makes its own
	// current once it polls (versioning.Promote). Zero: only on the
	// deployment's first start; `qm versions` routes by hand.
	Revision int
	// DrainTimeout bounds how long a stopping worker of a version no longer
	// routed to keeps serving the runs pinned to it (zero:
	// DefaultDrainTimeout).
	DrainTimeout time.Duration
	// AdoptPeriod is how often a worker looks for a current build whose
	// workers are gone, and PollerGone how long after its last poll a
	// worker counts as gone (zero: adoptPeriod and pollerGone, so that a
	// new install waits two and a half minutes at most; tests shorten them).
	AdoptPeriod, PollerGone time.Duration
	// Payloads reads what the SDK wrote with the client's data converter:
	// the builds' metadata (nil: the default converter; the payload codec's
	// when payloads are encrypted).
	Payloads converter.DataConverter
}

// DefaultDrainTimeout covers a provision or bind that waits for its
// resources to become ready (a plan's readiness timeout is 10 minutes at
// most), with room to spare; the chart's terminationGracePeriodSeconds
// covers it and the stop timeout.
const DefaultDrainTimeout = 15 * time.Minute

// drainPoll is how often a draining worker asks whether its runs are done.
const drainPoll = 2 * time.Second

// Enabled says whether the worker is versioned.
func (v Versioning) Enabled() bool { return v.BuildID != "" }

// Check says whether the names can name a version.
func (v Versioning) Check() error {
	return versioning.Check(v.Deployment, v.BuildID)
}

func (v Versioning) options() sdkworker.DeploymentOptions {
	if !v.Enabled() {
		return sdkworker.DeploymentOptions{}
	}
	// A run that ends (an operation, a check) stays on the build that
	// started it; the never-ending ones say otherwise where they are
	// registered (workflows.Register).
	return sdkworker.DeploymentOptions{UseVersioning: true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: v.Deployment, BuildID: v.BuildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned}
}

// Promote makes the worker's version the deployment's current one when
// versioning.Promote says so. The server knows a version once one of its
// workers polls, so it waits for that, until ctx is done.
func Promote(ctx context.Context, c client.Client, v Versioning, log *slog.Logger) error {
	h := c.WorkerDeploymentClient().GetHandle(v.Deployment)
	d, err := awaitVersion(ctx, h, v.BuildID)
	if err != nil {
		return err
	}
	rc := d.Info.RoutingConfig
	s := versioning.Startup{Revision: v.Revision, EverRouted: !rc.CurrentVersionChangedTime.IsZero(),
		Current: rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == v.BuildID}
	if rc.CurrentVersion != nil && !s.Current {
		if s.CurrentGone, err = gone(ctx, c, v, rc.CurrentVersion.BuildID); err != nil {
			return err
		}
	}
	for _, sum := range d.Info.VersionSummaries {
		if s.Recorded, err = appendRevision(ctx, h, sum.Version.BuildID, s.Recorded, v.Payloads); err != nil {
			return err
		}
	}
	if !versioning.Promote(s) {
		return nil
	}
	if v.Revision > 0 {
		if err := retryBusy(ctx, func() error {
			_, err := h.UpdateVersionMetadata(ctx, client.WorkerDeploymentUpdateVersionMetadataOptions{
				Version:        sdkworker.WorkerDeploymentVersion{DeploymentName: v.Deployment, BuildID: v.BuildID},
				MetadataUpdate: client.WorkerDeploymentMetadataUpdate{UpsertEntries: map[string]any{versioning.MetadataRevision: v.Revision}},
			})
			return err
		}); err != nil {
			return fmt.Errorf("recording revision %d on build %s: %w", v.Revision, v.BuildID, err)
		}
	}
	if err := setCurrent(ctx, c, v); err != nil {
		return err
	}
	log.Info("made its build the current version of the worker deployment", "deployment", v.Deployment, "buildID", v.BuildID, "revision", v.Revision)
	return nil
}

// MakeCurrent makes v's build current once its workers poll both task
// queues (waiting until ctx is done for them), and returns once the task
// queues route to it: what `qm builds current --wait` and the chart's
// rollback hook do.
func MakeCurrent(ctx context.Context, c client.Client, v Versioning) error {
	if _, err := awaitVersion(ctx, c.WorkerDeploymentClient().GetHandle(v.Deployment), v.BuildID); err != nil {
		return err
	}
	return setCurrent(ctx, c, v)
}

func setCurrent(ctx context.Context, c client.Client, v Versioning) error {
	if err := retryBusy(ctx, func() error {
		_, err := c.WorkerDeploymentClient().GetHandle(v.Deployment).SetCurrentVersion(ctx,
			client.WorkerDeploymentSetCurrentVersionOptions{BuildID: v.BuildID})
		return err
	}); err != nil {
		return fmt.Errorf("making build %s the current version of %s: %w", v.BuildID, v.Deployment, err)
	}
	return AwaitRouted(ctx, c, v)
}

// propagated says whether the task queues route as the deployment says:
// Temporal hands a routing change to the task queues after it answers, and
// until they have it a new run may still start on the build before.
func propagated(ctx context.Context, c client.Client, v Versioning) (bool, error) {
	var resp *workflowservice.DescribeWorkerDeploymentResponse
	err := retryBusy(ctx, func() (err error) {
		resp, err = c.WorkflowService().DescribeWorkerDeployment(ctx, &workflowservice.DescribeWorkerDeploymentRequest{
			Namespace: cmp.Or(v.Namespace, "default"), DeploymentName: v.Deployment})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("describing the worker deployment %s: %w", v.Deployment, err)
	}
	return resp.GetWorkerDeploymentInfo().GetRoutingConfigUpdateState() != enums.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS, nil
}

// AwaitRouted returns once the task queues route as v's deployment says
// (after a routing change; `qm builds current --wait`).
func AwaitRouted(ctx context.Context, c client.Client, v Versioning) error {
	for {
		done, err := propagated(ctx, c, v)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the task queues to route as %s says: %w", v.Deployment, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// adoptPeriod is how often a worker looks for a current build whose
// workers are gone.
const adoptPeriod = 30 * time.Second

// Adopt makes the worker's build current whenever the current build's
// workers are gone (versioning.Startup.CurrentGone), until ctx is done: so
// that a new install over a deployment whose release was removed moments
// before, or a build whose every worker died, does not leave the runs
// routed to no one.
func Adopt(ctx context.Context, c client.Client, v Versioning, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(cmp.Or(v.AdoptPeriod, adoptPeriod)):
		}
		if err := adopt(ctx, c, v, log); err != nil && ctx.Err() == nil {
			log.Warn("could not check that the current build has workers", "error", err.Error())
		}
	}
}

func adopt(ctx context.Context, c client.Client, v Versioning, log *slog.Logger) error {
	d, err := c.WorkerDeploymentClient().GetHandle(v.Deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return fmt.Errorf("describing the worker deployment: %w", err)
	}
	cur := d.Info.RoutingConfig.CurrentVersion
	if cur == nil || cur.BuildID == v.BuildID {
		return nil
	}
	if g, err := gone(ctx, c, v, cur.BuildID); err != nil || !g {
		return err
	}
	if err := setCurrent(ctx, c, v); err != nil {
		return err
	}
	log.Warn("made its build current: no worker of the current build was left", "gone", cur.BuildID, "buildID", v.BuildID)
	return nil
}

// pollerGone is how long after its last poll a worker counts as gone: a
// poll waits a minute at most for a task, and a worker polls again at once.
const pollerGone = 2 * time.Minute

// gone says whether no worker of build has polled the task queue within
// PollerGone, as the server lists its pollers.
func gone(ctx context.Context, c client.Client, v Versioning, build string) (bool, error) {
	resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace: cmp.Or(v.Namespace, "default"), TaskQueue: &taskqueuepb.TaskQueue{Name: runs.TaskQueue, Kind: enums.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enums.TASK_QUEUE_TYPE_WORKFLOW})
	if err != nil {
		return false, fmt.Errorf("listing the pollers of task queue %s: %w", runs.TaskQueue, err)
	}
	for _, p := range resp.GetPollers() {
		o := p.GetDeploymentOptions()
		if o.GetDeploymentName() == v.Deployment && o.GetBuildId() == build && time.Since(p.GetLastAccessTime().AsTime()) < cmp.Or(v.PollerGone, pollerGone) {
			return false, nil
		}
	}
	return true, nil
}

// awaitVersion describes the deployment once the server knows build and
// has seen its workers poll both the workflow and the activity task queue:
// Temporal refuses to make current a build that polls fewer task queues
// than the current one.
func awaitVersion(ctx context.Context, h client.WorkerDeploymentHandle, build string) (client.WorkerDeploymentDescribeResponse, error) {
	waited := func() error {
		return fmt.Errorf("waiting for Temporal to know build %s and its task queues: %w", build, context.Cause(ctx))
	}
	for {
		d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if ctx.Err() != nil { // the wait ran out, perhaps inside the call
			return d, waited()
		}
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) && !busy(err) {
			return d, fmt.Errorf("describing the worker deployment: %w", err)
		}
		if err == nil && slices.ContainsFunc(d.Info.VersionSummaries, func(s client.WorkerDeploymentVersionSummary) bool { return s.Version.BuildID == build }) {
			v, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
			if ctx.Err() != nil {
				return d, waited()
			}
			if err != nil && !errors.As(err, &notFound) && !busy(err) {
				return d, fmt.Errorf("describing build %s: %w", build, err)
			}
			if err == nil && polls(v.Info.TaskQueuesInfos, client.TaskQueueTypeWorkflow) && polls(v.Info.TaskQueuesInfos, client.TaskQueueTypeActivity) {
				return d, nil
			}
		}
		select {
		case <-ctx.Done():
			return d, waited()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// polls says whether infos hold Quartermaster's task queue of type typ.
func polls(infos []client.WorkerDeploymentTaskQueueInfo, typ client.TaskQueueType) bool {
	return slices.Contains(infos, client.WorkerDeploymentTaskQueueInfo{Name: runs.TaskQueue, Type: typ})
}

// appendRevision appends the revision recorded on build, if any, read with
// dc (nil: the default converter), the converter of the client that wrote it.
func appendRevision(ctx context.Context, h client.WorkerDeploymentHandle, build string, to []int, dc converter.DataConverter) ([]int, error) {
	var d client.WorkerDeploymentVersionDescription
	err := retryBusy(ctx, func() (err error) {
		d, err = h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
		return err
	})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		// Listed by the deployment a moment before its own record exists:
		// a build whose first worker has just polled has recorded nothing.
		return to, nil
	}
	if err != nil {
		return to, fmt.Errorf("describing build %s: %w", build, err)
	}
	p, ok := d.Info.Metadata[versioning.MetadataRevision]
	if !ok {
		return to, nil
	}
	var rev int
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	if err := dc.FromPayload(p, &rev); err != nil {
		return to, fmt.Errorf("reading the revision recorded on build %s: %w", build, err)
	}
	return append(to, rev), nil
}

// Drain returns once a stopping worker may stop (versioning.Leave), or
// when the drain timeout passes, saying what it leaves behind. The worker
// polls all the while.
func Drain(ctx context.Context, c client.Client, v Versioning, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(v.DrainTimeout, DefaultDrainTimeout))
	defer cancel()
	said := false
	var empty time.Time // since when no pinned run was seen, look after look
	for {
		r, err := routing(ctx, c, v)
		if err != nil {
			log.Warn("could not tell whether runs are pinned to this build", "buildID", v.BuildID, "error", err.Error())
		} else {
			switch {
			case r.Pinned > 0:
				empty = time.Time{}
			case empty.IsZero():
				empty = time.Now()
			}
			if r.Pinned == 0 {
				r.EmptyFor = time.Since(empty)
			}
			if versioning.Leave(r) {
				return
			}
			if r.Pinned > 0 && !said {
				log.Info("serving the runs pinned to this build before it stops", "buildID", v.BuildID, "pinned", r.Pinned)
				said = true
			}
		}
		select {
		case <-ctx.Done():
			log.Warn("stopping with runs pinned to this build still open: they wait for a worker of it (docs/upgrades.md)",
				"buildID", v.BuildID, "pinned", r.Pinned)
			return
		case <-time.After(drainPoll):
		}
	}
}

// routing asks whether the deployment routes to v, and how many open runs
// are pinned to it.
func routing(ctx context.Context, c client.Client, v Versioning) (versioning.Routing, error) {
	d, err := c.WorkerDeploymentClient().GetHandle(v.Deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return versioning.Routing{}, fmt.Errorf("describing the worker deployment: %w", err)
	}
	rc := d.Info.RoutingConfig
	r := versioning.Routing{
		Current: rc.CurrentVersion != nil && rc.CurrentVersion.BuildID == v.BuildID,
		Ramping: rc.RampingVersion != nil && rc.RampingVersion.BuildID == v.BuildID && rc.RampingVersionPercentage > 0,
	}
	// Until the task queues have the change, new runs may still be pinned
	// here: the build counts as routed to.
	done, err := propagated(ctx, c, v)
	if err != nil {
		return r, err
	}
	r.Ramping = r.Ramping || !done
	n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: versioning.PinnedQuery(v.Deployment, v.BuildID)})
	if err != nil {
		return r, fmt.Errorf("counting the runs pinned to build %s: %w", v.BuildID, err)
	}
	r.Pinned = n.GetCount()
	return r, nil
}
