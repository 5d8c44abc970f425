// Package fairness decides the order in which Temporal hands out
// Quartermaster's work when there is more of it than workers: each run's
// priority, by what it is, and its fairness key, by whose it is.
//
// Temporal's task queues serve priority 1 first and 5 last (a run without
// one is 3), and among the runs of one priority give each fairness key its
// share, so that a tenant's burst is one key among many instead of a queue
// in front of everyone. A run's activities and child runs inherit both.
package fairness

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Priorities, first served first. The order is ARCHITECTURE.md's
// ("Fairness").
const (
	// User is an operation someone asked for and waits on: an OSB or
	// kubectl provision, update, bind, unbind or deprovision, and claims.
	User = 2
	// Follow is what keeps users' workloads following their bindings:
	// usages and ServiceBindings. Temporal's default.
	Follow = 3
	// Background is the operators' and the schedule's work: mass updates
	// and the updates they start, credential rotations.
	Background = 4
	// Checks are the registered services' health checks, which a late pass
	// catches up on.
	Checks = 5
)

// maxKey bounds a fairness key: Temporal keeps keys short, and an
// organization GUID or a namespace is far shorter.
const maxKey = 64

// Tenant is the fairness key of an operation on a resource of namespace:
// the OSB organization that asked for it when there is one (a platform's
// instances all live in the broker's namespace), else the namespace, whose
// kubectl users it serves.
func Tenant(namespace, organization string) string {
	if organization != "" {
		return bound("org/" + organization)
	}
	return bound("ns/" + namespace)
}

// Organization is the tenant an OSB request is made for: a Kubernetes
// platform's namespace (its context's; its organization_guid names the
// whole cluster), else the organization_guid of the context or, failing
// that, of the request (organizationGUID, which OSB deprecated in favour of
// the context); "" for none.
func Organization(context []byte, organizationGUID string) string {
	var c struct {
		OrganizationGUID string `json:"organization_guid"`
		Namespace        string `json:"namespace"`
	}
	if len(context) > 0 && json.Unmarshal(context, &c) == nil {
		if c.Namespace != "" {
			return c.Namespace
		}
		if c.OrganizationGUID != "" {
			return c.OrganizationGUID
		}
	}
	return organizationGUID
}

// MassUpdate is the fairness key of a mass update's own updates: the run
// is one tenant among the others, however many instances it updates.
func MassUpdate(name string) string { return bound("massupdate/" + name) }

func bound(key string) string {
	if len(key) <= maxKey {
		return key
	}
	return strings.ToValidUTF8(key[:maxKey], "")
}

// WeightAnnotation, on a namespace or a catalog's SFPlan, is the share of
// the queue its operations' tenant gets beside the others, for tiers: "4"
// is four times the share of a tenant without one (1). A tenant cannot
// raise its own: namespaces are the cluster administrator's, and a plan's
// counts only in the catalog.
const WeightAnnotation = "quartermaster.io/fairness-weight"

// Temporal clamps a weight to [0.001, 1000].
const (
	minWeight = 0.001
	maxWeight = 1000
)

// Weight is the fairness weight of an operation from the WeightAnnotation
// values of its namespace and its plan: their product, each absent or
// unreadable one counting as 1; 0 means Temporal's default (1).
func Weight(values ...string) float32 {
	w, set := 1.0, false
	for _, v := range values {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if v == "" || err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			continue
		}
		w, set = w*f, true
	}
	if !set {
		return 0
	}
	return float32(min(max(w, minWeight), maxWeight))
}
