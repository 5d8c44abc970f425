// Package loops decides which of Quartermaster's long-lived runs are
// missing from Temporal: the health-check and drift-check shards, the claim allocators,
// the claims, the binding usages, the ServiceBindings and the automatic
// mass updates, and the operations under way. Kubernetes holds the truth: a run that the resources call
// for and that Temporal no longer has (its state restored empty, its
// namespace recreated, a run terminated by hand) is started again from
// them. The watcher (starter/loops.go) lists what should run and what
// does; this package compares the two, without Temporal.
package loops

import (
	"slices"
	"strings"
)

// Kinds of long-lived run, as the metric qm_runs_reestablished_total
// labels them.
const (
	HealthChecks   = "health-checks"
	DriftChecks    = "drift-checks"
	ClaimAllocator = "claim-allocator"
	Claim          = "claim"
	BindingUsage   = "binding-usage"
	ServiceBinding = "service-binding"
	AutoMassUpdate = "auto-mass-update"
	// CredentialRotation is a rotating binding's schedule.
	CredentialRotation = "credential-rotation"
	// InstanceOperation and BindingOperation are operations whose
	// resource says they are under way: they end, but until then a lost
	// run leaves its resource "in progress" for good.
	InstanceOperation = "instance-operation"
	BindingOperation  = "binding-operation"
)

// Want is a run that the resources call for.
type Want struct {
	// ID is the run's workflow ID.
	ID string
	// Namespace and Name are the resource it follows (the namespace
	// alone for an allocator, neither for a health-check shard).
	Namespace, Name string
	// Shard is a health-check loop's shard.
	Shard int
	// Deleting: the resource is being deleted. Its run may have ended
	// having done so, before the resource left the watcher's cache.
	Deleting bool
}

// Status is what Temporal says of a run's latest execution.
type Status int

// The statuses Decide tells apart.
const (
	// NotFound: Temporal has no run under the ID.
	NotFound Status = iota
	// Running: a run goes on.
	Running
	// Completed: the latest run ended as it meant to.
	Completed
	// Ended: the latest run failed, timed out, was terminated or
	// cancelled.
	Ended
)

// Suspects are the wants that visibility does not list among the running
// runs (or, where ended runs count, among any runs): each may be missing,
// or visibility may lag a run started a moment ago. Decide settles each
// one from the run's own description. They come in ID order, so a pass
// that is cut short resumes where it was on the next.
func Suspects(want []Want, listed map[string]bool) []Want {
	var out []Want
	for _, w := range want {
		if !listed[w.ID] {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b Want) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Decide says whether a suspect run must be started again, given what
// Temporal says of it. A run that goes on is left alone. A run of a
// resource being deleted that completed did its work. A one-off run (an
// automatic mass update: endedCounts) that ended in any way is done: a
// failed update is the operator's to retry. Every other want with no run
// is re-established.
func Decide(w Want, s Status, endedCounts bool) bool {
	switch s {
	case Running:
		return false
	case Completed:
		return !endedCounts && !w.Deleting
	case Ended:
		return !endedCounts
	default:
		return true
	}
}
