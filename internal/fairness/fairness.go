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

// Organization is the organization of an OSB request's context: its
// organization_guid (Cloud Foundry), or the namespace of a Kubernetes
// platform's; "" for none.
func Organization(context []byte) string {
	var c struct {
		OrganizationGUID string `json:"organization_guid"`
		Namespace        string `json:"namespace"`
	}
	if len(context) == 0 || json.Unmarshal(context, &c) != nil {
		return ""
	}
	if c.OrganizationGUID != "" {
		return c.OrganizationGUID
	}
	return c.Namespace
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
