package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	scv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/scheduling"
)

// Fleet is a Prometheus collector of the fleet's state, counted from a
// cache of the resources on each scrape.
type Fleet struct {
	// Reader lists the resources: the watcher's cache.
	Reader client.Reader
	// Logger hears of a kind that could not be listed; its gauges are left
	// out of that scrape rather than reported as zero.
	Logger *slog.Logger
	// Only, when set, are the kinds counted: a watcher shard that holds
	// only the instances and bindings counts only those (every shard's
	// series add up to the fleet's).
	Only []client.Object
	// Shard is the watcher shard that counts ("0/1" when empty: the whole
	// watcher), the value of the instances' and bindings' gauges' label
	// shard: the replicas of a shard are taken at their max, as for one
	// watcher, and the shards' sums added up.
	Shard string
}

// servedFleet is the process's Fleet in controller-runtime's registry: it
// counts with the Fleet that Serve gave it last, and nothing while none
// (a worker's process). One collector for the process, because a process
// may run a watcher again after the first stopped (qm dev, tests), and a
// registry takes one collector of each gauge.
type servedFleet struct {
	mu     sync.Mutex
	fleets []*Fleet
}

// counter is one kind's count: it lists the kind and adds to its tallies.
type counter struct {
	kind  client.Object
	descs []*prometheus.Desc
	count func(ctx context.Context, r client.Reader, add adder) error
	// sharded: the kind is divided between watcher shards, and its gauges
	// say which one counted (their last label, shard).
	sharded bool
}

// adder adds v to the series of desc with these label values.
type adder func(desc *prometheus.Desc, v float64, labels ...string)

// tallies sums values by gauge and label values.
type tallies map[tallyKey]float64

// tallyKey is one series: a gauge and its label values, of which it has n
// (three at most, as the gauges' descriptions have).
type tallyKey struct {
	desc   *prometheus.Desc
	labels [3]string
	n      int
}

var served = &servedFleet{}

// Serve has the process's registry count the fleet as f says until stop
// is called.
func Serve(fleet Fleet) (stop func()) {
	f := &fleet
	served.mu.Lock()
	served.fleets = append(served.fleets, f)
	served.mu.Unlock()
	return func() {
		served.mu.Lock()
		defer served.mu.Unlock()
		served.fleets = slices.DeleteFunc(served.fleets, func(g *Fleet) bool { return g == f })
	}
}

func (s *servedFleet) Describe(ch chan<- *prometheus.Desc) { (&Fleet{}).Describe(ch) }

func (s *servedFleet) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	var f *Fleet
	if n := len(s.fleets); n > 0 {
		f = s.fleets[n-1]
	}
	s.mu.Unlock()
	if f != nil {
		f.Collect(ch)
	}
}

// countTimeout bounds one scrape's lists: a kind whose informer is not
// synced yet is left out rather than holding the scrape.
const countTimeout = 5 * time.Second

// conditionScheduled is the instance condition the scheduling step keeps
// (activities.ConditionScheduled); False while no cluster has room.
const conditionScheduled = "Scheduled"

// Gauges of the fleet's state.
var (
	instancesDesc = prometheus.NewDesc("qm_instances",
		"SFServiceInstances by plan and state of their last operation (pending: none began yet), by the watcher shard that counts them.",
		[]string{"service", "plan", "state", "shard"}, nil)
	waitingDesc = prometheus.NewDesc("qm_instances_waiting_for_cluster",
		"SFServiceInstances whose provision waits for a cluster with room (Scheduled=False).",
		[]string{"service", "plan", "shard"}, nil)
	bindingsDesc = prometheus.NewDesc("qm_bindings",
		"SFServiceBindings by plan and state of their last operation.",
		[]string{"service", "plan", "state", "shard"}, nil)
	overdueDesc = prometheus.NewDesc("qm_bindings_rotation_overdue",
		"Rotating SFServiceBindings whose next rotation is more than a minute late (status.rotation.nextRotation), by plan: 0 while none of the plan's is.",
		[]string{"service", "plan", "shard"}, nil)
	maxPollingDesc = prometheus.NewDesc("qm_plan_maximum_polling_seconds",
		"Each plan's maximum_polling_duration (an hour when it sets none): the time an operation may stay in progress.",
		[]string{"service", "plan"}, nil)
	clusterInstancesDesc = prometheus.NewDesc("qm_cluster_instances",
		"Instances each SFCluster holds (status.serviceInstanceCount).",
		[]string{"namespace", "cluster"}, nil)
	reservationsDesc = prometheus.NewDesc("qm_cluster_reservations",
		"Instances scheduled onto each SFCluster whose provision has not succeeded yet: the scheduler's reservations.",
		[]string{"namespace", "cluster", "shard"}, nil)
	clusterUseDesc = prometheus.NewDesc("qm_cluster_use_ratio",
		"Each SFCluster's requests over its capacity, by resource.",
		[]string{"namespace", "cluster", "resource"}, nil)
	clusterLimitDesc = prometheus.NewDesc("qm_cluster_limit_ratio",
		"The share of its capacity the scheduler fills each SFCluster to (schedulingLimitPercentage / 100).",
		[]string{"namespace", "cluster"}, nil)
	clusterReadyDesc = prometheus.NewDesc("qm_cluster_ready",
		"1 while an SFCluster's cluster answers its probes (state Ready), else 0.",
		[]string{"namespace", "cluster"}, nil)
	servicesDesc = prometheus.NewDesc("qm_registered_services",
		"RegisteredServices by state (Available, Claimed, Unknown, Unreachable).",
		[]string{"namespace", "state"}, nil)
	claimsDesc = prometheus.NewDesc("qm_service_claims",
		"ServiceClaims by state (Pending, Resolved, Invalid).",
		[]string{"namespace", "state"}, nil)
	usagesDesc = prometheus.NewDesc("qm_binding_usages",
		"ServiceBindingUsages by state (Pending, Ready, Failed).",
		[]string{"namespace", "state"}, nil)
	serviceBindingsDesc = prometheus.NewDesc("qm_service_bindings",
		"servicebinding.io ServiceBindings by their Ready condition (True, False, Unknown).",
		[]string{"namespace", "ready"}, nil)
)

var counters = []counter{
	{&osbv1alpha1.SFServiceInstance{}, []*prometheus.Desc{instancesDesc, waitingDesc, reservationsDesc}, countInstances, true},
	{&osbv1alpha1.SFServiceBinding{}, []*prometheus.Desc{bindingsDesc, overdueDesc}, countBindings, true},
	{&osbv1alpha1.SFPlan{}, []*prometheus.Desc{maxPollingDesc}, countPlans, false},
	{&resourcev1alpha1.SFCluster{}, []*prometheus.Desc{clusterInstancesDesc, clusterUseDesc, clusterLimitDesc, clusterReadyDesc}, countClusters, false},
	{&primazav1alpha1.RegisteredService{}, []*prometheus.Desc{servicesDesc}, byState(servicesDesc, &primazav1alpha1.RegisteredServiceList{}, serviceState), false},
	{&primazav1alpha1.ServiceClaim{}, []*prometheus.Desc{claimsDesc}, byState(claimsDesc, &primazav1alpha1.ServiceClaimList{}, claimState), false},
	{&scv1alpha1.ServiceBindingUsage{}, []*prometheus.Desc{usagesDesc}, byState(usagesDesc, &scv1alpha1.ServiceBindingUsageList{}, usageState), false},
	{&sbv1.ServiceBinding{}, []*prometheus.Desc{serviceBindingsDesc}, byState(serviceBindingsDesc, &sbv1.ServiceBindingList{}, serviceBindingReady), false},
}

// Kinds are the kinds the fleet's gauges count: a cache that serves them
// has their informers synced first, so that its first scrape counts them
// all.
func Kinds() []client.Object {
	kinds := make([]client.Object, 0, len(counters))
	for _, c := range counters {
		kinds = append(kinds, c.kind)
	}
	return kinds
}

// Describe sends every gauge's description.
func (f *Fleet) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range counters {
		for _, d := range c.descs {
			ch <- d
		}
	}
}

// Collect counts each kind in the cache and sends its gauges.
func (f *Fleet) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	for _, c := range f.counters() {
		t := tallies{}
		if err := c.count(ctx, f.Reader, t.add); err != nil {
			if f.Logger != nil {
				f.Logger.Warn("counting the fleet's state for its metrics", "kind", fmt.Sprintf("%T", c.kind), "error", err)
			}
			continue
		}
		var extra []string
		if c.sharded {
			extra = []string{cmp.Or(f.Shard, "0/1")}
		}
		for _, m := range t.metrics(extra...) {
			ch <- m
		}
	}
}

// counters are the counters of the kinds f counts.
func (f *Fleet) counters() []counter {
	if len(f.Only) == 0 {
		return counters
	}
	var out []counter
	for _, c := range counters {
		if slices.ContainsFunc(f.Only, func(k client.Object) bool { return reflect.TypeOf(k) == reflect.TypeOf(c.kind) }) {
			out = append(out, c)
		}
	}
	return out
}

func (t tallies) add(desc *prometheus.Desc, v float64, labels ...string) {
	k := tallyKey{desc: desc, n: len(labels)}
	copy(k.labels[:], labels)
	t[k] += v
}

// metrics are the tallies' series, with the label values extra after
// each one's own.
func (t tallies) metrics(extra ...string) []prometheus.Metric {
	out := make([]prometheus.Metric, 0, len(t))
	for k, v := range t {
		out = append(out, prometheus.MustNewConstMetric(k.desc, prometheus.GaugeValue, v, append(k.labels[:k.n:k.n], extra...)...))
	}
	return out
}

// listAll lists a kind from the cache without copying its objects: the
// counters only read them.
func listAll(ctx context.Context, r client.Reader, l client.ObjectList) error {
	if err := r.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing %T: %w", l, err)
	}
	return nil
}

func countInstances(ctx context.Context, r client.Reader, add adder) error {
	var l osbv1alpha1.SFServiceInstanceList
	if err := listAll(ctx, r, &l); err != nil {
		return err
	}
	for i := range l.Items {
		inst := &l.Items[i]
		add(instancesDesc, 1, inst.Spec.ServiceID, inst.Spec.PlanID, state(string(inst.Status.State)))
		if c := meta.FindStatusCondition(inst.Status.Conditions, conditionScheduled); c != nil && c.Status == metav1.ConditionFalse {
			add(waitingDesc, 1, inst.Spec.ServiceID, inst.Spec.PlanID)
		}
		if inst.Spec.ClusterID != "" && inst.Status.AppliedSpec == nil && inst.DeletionTimestamp.IsZero() {
			add(reservationsDesc, 1, inst.Namespace, inst.Spec.ClusterID)
		}
	}
	return nil
}

// RotationGrace is how late a rotation may be before it counts as
// overdue: a rotation takes a bind's time.
const RotationGrace = time.Minute

func countBindings(ctx context.Context, r client.Reader, add adder) error {
	now := time.Now()
	var l osbv1alpha1.SFServiceBindingList
	if err := listAll(ctx, r, &l); err != nil {
		return err
	}
	for i := range l.Items {
		b := &l.Items[i]
		add(bindingsDesc, 1, b.Spec.ServiceID, b.Spec.PlanID, state(string(b.Status.State)))
		if r := b.Status.Rotation; r != nil && r.NextRotation != nil && b.DeletionTimestamp.IsZero() {
			// Every rotating binding counts, 0 or 1, so that the alert's
			// series exists before the first one is late.
			late := now.Sub(r.NextRotation.Time) > RotationGrace
			add(overdueDesc, map[bool]float64{true: 1, false: 0}[late], b.Spec.ServiceID, b.Spec.PlanID)
		}
	}
	return nil
}

func countPlans(ctx context.Context, r client.Reader, add adder) error {
	var l osbv1alpha1.SFPlanList
	if err := listAll(ctx, r, &l); err != nil {
		return err
	}
	for i := range l.Items {
		p := &l.Items[i]
		limit := time.Hour // activities.DefaultMaxPolling
		if p.Spec.MaximumPollingDuration != nil {
			limit = time.Duration(*p.Spec.MaximumPollingDuration) * time.Second
		}
		add(maxPollingDesc, limit.Seconds(), p.Spec.ServiceID, p.Spec.ID)
	}
	return nil
}

func countClusters(ctx context.Context, r client.Reader, add adder) error {
	var l resourcev1alpha1.SFClusterList
	if err := listAll(ctx, r, &l); err != nil {
		return err
	}
	for i := range l.Items {
		c := &l.Items[i]
		add(clusterInstancesDesc, float64(c.Status.ServiceInstanceCount), c.Namespace, c.Name)
		limit := scheduling.DefaultLimitPercentage
		if c.Spec.SchedulingLimitPercentage != nil {
			limit = int(*c.Spec.SchedulingLimitPercentage)
		}
		add(clusterLimitDesc, float64(limit)/100, c.Namespace, c.Name)
		for name, capacity := range c.Status.TotalCapacity {
			if capacity.IsZero() {
				continue
			}
			used := c.Status.Requests[name]
			add(clusterUseDesc, float64(used.MilliValue())/float64(capacity.MilliValue()), c.Namespace, c.Name, string(name))
		}
		ready := 0.0
		if c.Status.State == resourcev1alpha1.ClusterReady {
			ready = 1
		}
		add(clusterReadyDesc, ready, c.Namespace, c.Name)
	}
	return nil
}

// byState counts a namespaced kind by namespace and the state stateOf
// reads from each object.
func byState(desc *prometheus.Desc, list client.ObjectList, stateOf func(runtime.Object) string) func(context.Context, client.Reader, adder) error {
	return func(ctx context.Context, r client.Reader, add adder) error {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := listAll(ctx, r, l); err != nil {
			return err
		}
		return meta.EachListItem(l, func(o runtime.Object) error {
			add(desc, 1, o.(client.Object).GetNamespace(), stateOf(o))
			return nil
		})
	}
}

func serviceState(o runtime.Object) string {
	return state(string(o.(*primazav1alpha1.RegisteredService).Status.State))
}

func claimState(o runtime.Object) string {
	return state(string(o.(*primazav1alpha1.ServiceClaim).Status.State))
}

func usageState(o runtime.Object) string {
	return state(string(o.(*scv1alpha1.ServiceBindingUsage).Status.State))
}

// serviceBindingReady is a ServiceBinding's Ready condition's status.
func serviceBindingReady(o runtime.Object) string {
	if c := meta.FindStatusCondition(o.(*sbv1.ServiceBinding).Status.Conditions, sbv1.ConditionReady); c != nil {
		return string(c.Status)
	}
	return string(metav1.ConditionUnknown)
}

// state is a resource's state as a label: "pending" before the first
// operation or check wrote one.
func state(s string) string {
	if s == "" {
		return "pending"
	}
	return s
}
