// Package scheduling decides which registered cluster (SFCluster) an
// instance is provisioned on. It is pure: the caller gives it what the
// clusters look like now and what the instance asks for, and it returns
// the decision with why each cluster was taken or skipped. The activity
// that calls it serializes decisions: a worker's decisions of one
// namespace take turns (activities/scheduling_turns.go), and each is
// reserved in the namespace's ledger before the next is placed
// (activities/scheduling_ledger.go, Place), so that decisions taken
// together never overshoot a limit, on one worker or several. The workflow
// step (workflows/scheduling.go) only asks, and waits while no cluster
// qualifies.
package scheduling

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
)

// Scheduler names a way of choosing a cluster.
type Scheduler string

// The schedulers, as --scheduler and QM_SCHEDULER name them.
const (
	Default       Scheduler = "default"
	RoundRobin    Scheduler = "round-robin"
	LeastUtilized Scheduler = "least-utilized"
	LabelSelector Scheduler = "label-selector"
	Capacity      Scheduler = "capacity"
)

// Schedulers are every scheduler, for flags and their help.
var Schedulers = []Scheduler{Default, RoundRobin, LeastUtilized, LabelSelector, Capacity}

// Parse returns the scheduler named name.
func Parse(name string) (Scheduler, error) {
	if !slices.Contains(Schedulers, Scheduler(name)) {
		return "", fmt.Errorf("no scheduler %q; there are %v", name, Schedulers)
	}
	return Scheduler(name), nil
}

// Schedules is whether s chooses among clusters at all: the default
// (or none) puts everything in the one cluster without a decision.
func (s Scheduler) Schedules() bool {
	return s != "" && s != Default
}

// DefaultLimitPercentage is the share of its capacity a cluster is filled
// to when its SFCluster sets no schedulingLimitPercentage.
const DefaultLimitPercentage = 100

// Cluster is a registered cluster as the scheduler sees it.
type Cluster struct {
	Name   string
	Labels map[string]string
	// Ready is false for a cluster that could not be reached or read;
	// NotReadyReason then says why.
	Ready          bool
	NotReadyReason string
	// Instances is how many instances are scheduled on it.
	Instances int
	// Capacity is spec.totalCapacity, or the nodes' allocatable.
	Capacity corev1.ResourceList
	// Requests are its pods' requests plus the demand of the instances
	// scheduled on it and not yet running: what is already promised.
	Requests corev1.ResourceList
	// LimitPercentage is spec.schedulingLimitPercentage (0: the default).
	LimitPercentage int32
}

// Request is what is being scheduled.
type Request struct {
	Scheduler Scheduler
	// Selector is the plan's clusterSelector, rendered ("" selects all).
	Selector string
	// Demand is the plan's context.requests.
	Demand corev1.ResourceList
	// Last is the cluster the previous round-robin decision took.
	Last string
}

// Decision is the outcome: a cluster, or none with why.
type Decision struct {
	// Cluster is the chosen cluster's name; "" when none qualifies.
	Cluster string
	// Why says why Cluster was chosen.
	Why string
	// Skipped says, by cluster, why it was not chosen.
	Skipped map[string]string
}

// Explain is the decision in one line, for an event, a status and a
// last_operation description.
func (d Decision) Explain() string {
	var b strings.Builder
	if d.Cluster != "" {
		fmt.Fprintf(&b, "scheduled on %s: %s", d.Cluster, d.Why)
	} else {
		b.WriteString("no cluster qualifies")
	}
	names := make([]string, 0, len(d.Skipped))
	for name := range d.Skipped {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		sep := "; "
		if i == 0 {
			sep = " ("
			if d.Cluster == "" {
				sep = ": "
			}
		}
		fmt.Fprintf(&b, "%s%s: %s", sep, name, d.Skipped[name])
	}
	if len(names) > 0 && d.Cluster != "" {
		b.WriteString(")")
	}
	return b.String()
}

// Schedule chooses a cluster for req among clusters. With no cluster
// registered, and for the default scheduler, the answer is the local cluster (resourcev1alpha1.LocalCluster).
func Schedule(clusters []Cluster, req Request) (Decision, error) {
	if req.Scheduler == Default || req.Scheduler == "" || len(clusters) == 0 {
		return Decision{Cluster: resourcev1alpha1.LocalCluster, Why: "the cluster Quartermaster runs in"}, nil
	}
	clusters = slices.SortedFunc(slices.Values(clusters), func(a, b Cluster) int { return cmp.Compare(a.Name, b.Name) })
	d := Decision{Skipped: map[string]string{}}
	var selector labels.Selector
	if req.Scheduler == LabelSelector || req.Scheduler == Capacity {
		var err error
		if selector, err = labels.Parse(strings.TrimSpace(req.Selector)); err != nil {
			return Decision{}, fmt.Errorf("the plan's clusterSelector %q is not a label selector: %w", req.Selector, err)
		}
	}
	var fit []Cluster
	room := map[string]float64{}
	for _, c := range clusters {
		switch {
		case !c.Ready:
			d.Skipped[c.Name] = "not ready: " + cmp.Or(c.NotReadyReason, "unknown")
		case selector != nil && !selector.Matches(labels.Set(c.Labels)):
			d.Skipped[c.Name] = "labels do not match " + selector.String()
		default:
			if req.Scheduler == Capacity {
				r, why := headroom(c, req.Demand)
				if why != "" {
					d.Skipped[c.Name] = why
					continue
				}
				room[c.Name] = r
			}
			fit = append(fit, c)
		}
	}
	if len(fit) == 0 {
		return d, nil
	}
	chosen := pick(fit, req, room)
	d.Cluster = chosen.Name
	d.Why = reason(chosen, req, room)
	for _, c := range fit {
		if c.Name != chosen.Name {
			d.Skipped[c.Name] = "another fits better: " + reason(c, req, room)
		}
	}
	return d, nil
}

// pick chooses among the clusters that qualify.
func pick(fit []Cluster, req Request, room map[string]float64) Cluster {
	switch req.Scheduler {
	case RoundRobin:
		// The first after the last one taken, in name order: the position
		// survives clusters that come and go.
		for _, c := range fit {
			if c.Name > req.Last {
				return c
			}
		}
		return fit[0]
	case Capacity:
		return slices.MaxFunc(fit, func(a, b Cluster) int {
			return cmp.Or(cmp.Compare(room[a.Name], room[b.Name]), cmp.Compare(b.Instances, a.Instances))
		})
	default: // least-utilized, and label-selector's ties
		return slices.MinFunc(fit, func(a, b Cluster) int { return cmp.Compare(a.Instances, b.Instances) })
	}
}

// reason says what speaks for a cluster under req's scheduler.
func reason(c Cluster, req Request, room map[string]float64) string {
	switch req.Scheduler {
	case RoundRobin:
		return "next in turn"
	case Capacity:
		return fmt.Sprintf("%.0f%% room left on its scarcest resource, %d instances", 100*room[c.Name], c.Instances)
	default:
		return fmt.Sprintf("%d instances", c.Instances)
	}
}

// headroom is the share of its capacity a cluster has left on its
// scarcest resource once demand is placed, under its limit; or why the
// demand does not fit.
func headroom(c Cluster, demand corev1.ResourceList) (float64, string) {
	limit := cmp.Or(c.LimitPercentage, DefaultLimitPercentage)
	least := 1.0
	for _, name := range slices.Sorted(keys(demand, c.Capacity)) {
		capacity, ok := c.Capacity[name]
		if !ok || capacity.IsZero() {
			if q := demand[name]; !q.IsZero() {
				return 0, fmt.Sprintf("no %s capacity", name)
			}
			continue
		}
		used := c.Requests[name].DeepCopy()
		used.Add(demand[name])
		share := fraction(used, capacity)
		if share > float64(limit)/100 {
			return 0, fmt.Sprintf("%s %.0f%% > limit %d%%", name, 100*share, limit)
		}
		least = min(least, float64(limit)/100-share)
	}
	return least, ""
}

func fraction(used, capacity resource.Quantity) float64 {
	return float64(used.MilliValue()) / float64(capacity.MilliValue())
}

func keys(lists ...corev1.ResourceList) func(func(corev1.ResourceName) bool) {
	return func(yield func(corev1.ResourceName) bool) {
		seen := map[corev1.ResourceName]bool{}
		for _, l := range lists {
			for name := range l {
				if !seen[name] {
					seen[name] = true
					if !yield(name) {
						return
					}
				}
			}
		}
	}
}

// Place counts a decision for cluster name in clusters: one more instance,
// and demand more requested. Decisions taken together see each other
// through it.
func Place(clusters []Cluster, name string, demand corev1.ResourceList) {
	for i := range clusters {
		if clusters[i].Name != name {
			continue
		}
		clusters[i].Instances++
		if clusters[i].Requests == nil {
			clusters[i].Requests = corev1.ResourceList{}
		}
		Add(clusters[i].Requests, demand)
	}
}
