// Package drift decides whether the objects an instance's (or a
// binding's) last operation applied still hold what it applied: which
// instances and bindings a check pass looks at, when each falls due, how the applied objects are recorded, and how
// a live object is compared with its record. It reads nothing itself; the
// drift activities (activities/drift.go) read, and write what follows.
package drift

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
)

// Shards is how many loops share the instances: an instance is checked by
// loop Shard(namespace, name). It is fixed, because an instance must stay
// in its loop across releases.
const Shards = 8

// DefaultEvery is the time between two checks of an instance whose plan
// sets none.
const DefaultEvery = 10 * time.Minute

// MinEvery is the shortest time between two checks.
const MinEvery = time.Second

// TenantMinEvery is the shortest time between two checks of an instance of
// a tenant's plan (one outside the catalog namespaces): the checks run in
// the worker every tenant shares, and a tenant's plan must not buy its
// instances a check a second at everyone else's cost.
const TenantMinEvery = time.Minute

// Settings are a plan's drift settings with their defaults filled in.
type Settings struct {
	Every  time.Duration
	Action osbv1alpha1.DriftAction
}

// Of returns the drift settings of plan, and false when it asks for no
// checks. trusted says the plan is the catalog's (a tenant's plan checks
// no more often than TenantMinEvery).
func Of(plan *osbv1alpha1.SFPlan, trusted bool) (Settings, bool) {
	if plan == nil || plan.Spec.Drift == nil {
		return Settings{}, false
	}
	s := Settings{Every: DefaultEvery, Action: plan.Spec.Drift.Action}
	if e := plan.Spec.Drift.Every; e != nil {
		s.Every = max(e.Duration, MinEvery)
	}
	if !trusted {
		s.Every = max(s.Every, TenantMinEvery)
	}
	if s.Action == "" {
		s.Action = osbv1alpha1.DriftReport
	}
	return s, true
}

// Shard is the loop of the instance namespace/name, and of its bindings:
// a pass reads a binding's instance with it, and a shard with no instance
// whose plan asks for checks reads no bindings.
func Shard(namespace, name string) int { return healthcheck.ShardOf(namespace, name, Shards) }

// Due says whether a check of the instance with uid, every s.Every, falls
// in (from, to]: each instance at its own offset within the period, as
// health checks spread theirs.
func Due(uid string, s Settings, from, to time.Time) bool {
	return healthcheck.Due(uid, s.Every, from, to)
}

// AtRest says whether obj (an SFServiceInstance or an SFServiceBinding)
// is one a check compares: its last operation succeeded for its current
// spec, and nothing runs or is asked for that would apply its objects
// anyway. (Whether the record is of that operation's render is
// Record.Current's to say.)
func AtRest(obj client.Object) bool {
	var state osbv1alpha1.OperationState
	var observed int64
	switch o := obj.(type) {
	case *osbv1alpha1.SFServiceInstance:
		state, observed = o.Status.State, o.Status.ObservedGeneration
	case *osbv1alpha1.SFServiceBinding:
		state, observed = o.Status.State, o.Status.ObservedGeneration
	default:
		return false
	}
	return obj.GetDeletionTimestamp().IsZero() && state == osbv1alpha1.StateSucceeded && observed == obj.GetGeneration()
}
