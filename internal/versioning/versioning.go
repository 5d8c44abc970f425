// Package versioning holds the decisions of Quartermaster's use of Temporal's
// Worker Versioning: which build a worker deployment routes work to, and
// when a worker of a build that is no longer routed to may stop.
//
// A release's workers form one version (deployment name and build ID) of
// the installation's worker deployment. Temporal routes new runs, and the
// auto-upgrade runs at their next task, to the deployment's current version
// (or, for a share, its ramping one); a pinned run stays on the version
// that started it until it ends. These functions hold no Temporal: the
// worker package asks the server and acts on what they decide.
package versioning

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// MetadataRevision is the key of a version's metadata under which a worker
// records the release revision that made the version current, so that a
// pod of an older revision that restarts later does not take the routing
// back.
const MetadataRevision = "qm.revision"

// Startup is what a starting worker knows of its deployment.
type Startup struct {
	// Revision is the release revision the worker runs for (the chart's
	// .Release.Revision: every install, upgrade and rollback is a new, higher
	// one). Zero: the worker does not promote by revision.
	Revision int
	// Recorded are the revisions recorded on the deployment's versions.
	Recorded []int
	// EverRouted says the deployment has had a current version (or been set
	// to the unversioned workers) at some time.
	EverRouted bool
	// Current says the worker's own version is current already.
	Current bool
	// CurrentGone says no worker of the current version has polled for
	// longer than a poll lasts: the release it belongs to is gone (an
	// uninstall and a new install, a disaster).
	CurrentGone bool
}

// Promote says whether a starting worker makes its own version current: on
// the deployment's first start (nothing was ever routed), and when it runs
// for a release revision newer than any recorded, which is how an upgrade
// and a rollback of the chart hand the work to their build. A worker of an
// older revision restarting (a crash, a node drain) takes nothing back, and
// neither does one while an operator ramps by hand (Revision zero). Work
// routed to a build no worker serves any more is taken over by whichever
// starts: a new install's revisions start again from one.
func Promote(s Startup) bool {
	if s.Current {
		return false
	}
	if !s.EverRouted || s.CurrentGone {
		return true
	}
	return s.Revision > 0 && s.Revision > slices.Max(append([]int{0}, s.Recorded...))
}

// Routing is what a stopping worker knows of its version.
type Routing struct {
	// Current and Ramping say the deployment routes new work to the
	// worker's version.
	Current, Ramping bool
	// Pinned is the count of open runs pinned to the worker's version, and
	// EmptyFor how long it has been zero, look after look.
	Pinned   int64
	EmptyFor time.Duration
}

// Settle is how long a replaced version's worker must see no run pinned to
// it before it stops: visibility lists a run a moment after it starts (on
// SQL visibility, asynchronously), so one look could miss a run just
// started.
const Settle = 5 * time.Second

// Leave says whether a stopping worker may stop now. A version that work is
// routed to has other workers, or none is wanted (a scale-down): it stops at
// once and its pinned runs go on on the others. A version no longer routed
// to is being replaced: its workers keep serving the runs pinned to it
// until none has been open for Settle, since no other build may take them.
func Leave(r Routing) bool {
	return r.Current || r.Ramping || r.Pinned == 0 && r.EmptyFor >= Settle
}

// buildID is what a build ID may hold: it names a version in visibility
// queries and in the Temporal UI, so it is kept to an image tag's letters.
var buildID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// deploymentName may not hold the '.' and ':' Temporal joins a version's
// parts with.
var deploymentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// Check says whether a deployment name and build ID can name a version.
func Check(deployment, build string) error {
	if !deploymentName.MatchString(deployment) {
		return fmt.Errorf("worker deployment name %q: letters, digits, '-' and '_' only, 128 at most", deployment)
	}
	if !buildID.MatchString(build) {
		return fmt.Errorf("build ID %q: letters, digits, '.', '+', '-' and '_' only, 128 at most", build)
	}
	return nil
}

// PinnedQuery is the visibility query of the open runs pinned to a
// version. The deployment name and build ID must have passed Check.
func PinnedQuery(deployment, build string) string {
	return fmt.Sprintf(`TemporalWorkerDeploymentVersion = "%s:%s" AND TemporalWorkflowVersioningBehavior = "Pinned" AND ExecutionStatus = "Running"`,
		deployment, build)
}
