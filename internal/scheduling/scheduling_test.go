package scheduling_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/quartermaster/qm/internal/scheduling"
)

func list(cpu, memory string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		l[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return l
}

func TestSchedule(t *testing.T) {
	three := []scheduling.Cluster{
		{Name: "eu-1", Ready: true, Instances: 4, Labels: map[string]string{"plan": "gold"}},
		{Name: "eu-2", Ready: true, Instances: 2, Labels: map[string]string{"plan": "silver"}},
		{Name: "eu-3", Ready: true, Instances: 3, Labels: map[string]string{"plan": "gold"}},
	}
	sized := []scheduling.Cluster{
		{Name: "eu-1", Ready: true, Capacity: list("10", "10Gi"), Requests: list("7", "1Gi"), LimitPercentage: 80},
		{Name: "eu-2", Ready: true, Capacity: list("10", "10Gi"), Requests: list("2", "7Gi"), LimitPercentage: 80},
		{Name: "eu-3", Ready: true, Capacity: list("10", "10Gi"), Requests: list("2", "2Gi"), LimitPercentage: 80},
		{Name: "eu-4", Ready: false, NotReadyReason: "connection refused"},
	}
	for _, tc := range []struct {
		name     string
		clusters []scheduling.Cluster
		req      scheduling.Request
		want     string
		explain  string
	}{
		{"default: the one cluster", three, scheduling.Request{Scheduler: scheduling.Default}, "1",
			"scheduled on 1: the cluster Quartermaster runs in"},
		{"no cluster registered", nil, scheduling.Request{Scheduler: scheduling.LeastUtilized}, "1",
			"scheduled on 1: the cluster Quartermaster runs in"},
		{"least-utilized: the fewest instances", three, scheduling.Request{Scheduler: scheduling.LeastUtilized}, "eu-2",
			"scheduled on eu-2: 2 instances (eu-1: another fits better: 4 instances; eu-3: another fits better: 3 instances)"},
		{"round-robin: the next after the last", three, scheduling.Request{Scheduler: scheduling.RoundRobin, Last: "eu-1"}, "eu-2", ""},
		{"round-robin: wraps around", three, scheduling.Request{Scheduler: scheduling.RoundRobin, Last: "eu-3"}, "eu-1", ""},
		{"round-robin: the last one deregistered", three, scheduling.Request{Scheduler: scheduling.RoundRobin, Last: "eu-25"}, "eu-3", ""},
		{"label-selector: plan=gold, ties to the least utilized", three,
			scheduling.Request{Scheduler: scheduling.LabelSelector, Selector: "plan=gold"}, "eu-3",
			"scheduled on eu-3: 3 instances (eu-1: another fits better: 4 instances; eu-2: labels do not match plan=gold)"},
		{"label-selector: plan!=gold", three, scheduling.Request{Scheduler: scheduling.LabelSelector, Selector: "plan!=gold\n"}, "eu-2", ""},
		{"label-selector: nothing matches", three, scheduling.Request{Scheduler: scheduling.LabelSelector, Selector: "plan=bronze"}, "",
			"no cluster qualifies: eu-1: labels do not match plan=bronze; eu-2: labels do not match plan=bronze; eu-3: labels do not match plan=bronze"},
		{"capacity: the most room on the scarcest resource", sized,
			scheduling.Request{Scheduler: scheduling.Capacity, Demand: list("1", "512Mi")}, "eu-3",
			"scheduled on eu-3: 50% room left on its scarcest resource, 0 instances (eu-1: another fits better: 0% room left on its scarcest resource, 0 instances; eu-2: another fits better: 5% room left on its scarcest resource, 0 instances; eu-4: not ready: connection refused)"},
		{"capacity: nothing fits under the limit", sized,
			scheduling.Request{Scheduler: scheduling.Capacity, Demand: list("7", "")}, "",
			"no cluster qualifies: eu-1: cpu 140% > limit 80%; eu-2: cpu 90% > limit 80%; eu-3: cpu 90% > limit 80%; eu-4: not ready: connection refused"},
		{"capacity: up to the limit itself", sized,
			scheduling.Request{Scheduler: scheduling.Capacity, Demand: list("6", "")}, "eu-2", ""},
		{"capacity: a resource no cluster has", sized[:1],
			scheduling.Request{Scheduler: scheduling.Capacity, Demand: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}, "",
			"no cluster qualifies: eu-1: no nvidia.com/gpu capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := scheduling.Schedule(tc.clusters, tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.want, d.Cluster)
			if tc.explain != "" {
				assert.Equal(t, tc.explain, d.Explain())
			}
		})
	}
}

func TestRoundRobinSpreadsEvenly(t *testing.T) {
	clusters := []scheduling.Cluster{{Name: "a", Ready: true}, {Name: "b", Ready: true}, {Name: "c", Ready: true}}
	count := map[string]int{}
	last := ""
	for range 30 {
		d, err := scheduling.Schedule(clusters, scheduling.Request{Scheduler: scheduling.RoundRobin, Last: last})
		require.NoError(t, err)
		count[d.Cluster]++
		last = d.Cluster
	}
	assert.Equal(t, map[string]int{"a": 10, "b": 10, "c": 10}, count)
}

func TestCapacityNeverOvershoots(t *testing.T) {
	// Room for 10 instances of 1 CPU under an 80 % limit of 25 CPUs, over
	// two clusters; each decision is recorded before the next.
	clusters := []scheduling.Cluster{
		{Name: "a", Ready: true, Capacity: list("10", ""), Requests: list("2", ""), LimitPercentage: 80},
		{Name: "b", Ready: true, Capacity: list("15", ""), Requests: list("8", ""), LimitPercentage: 80},
	}
	placed := 0
	for range 50 {
		d, err := scheduling.Schedule(clusters, scheduling.Request{Scheduler: scheduling.Capacity, Demand: list("1", "")})
		require.NoError(t, err)
		if d.Cluster == "" {
			continue
		}
		placed++
		for i := range clusters {
			if clusters[i].Name == d.Cluster {
				q := clusters[i].Requests[corev1.ResourceCPU]
				q.Add(resource.MustParse("1"))
				clusters[i].Requests[corev1.ResourceCPU] = q
				clusters[i].Instances++
			}
		}
	}
	assert.Equal(t, 10, placed)
	assert.Equal(t, 6, clusters[0].Instances)
	assert.Equal(t, 4, clusters[1].Instances)
}

func TestBadSelector(t *testing.T) {
	_, err := scheduling.Schedule([]scheduling.Cluster{{Name: "a", Ready: true}},
		scheduling.Request{Scheduler: scheduling.LabelSelector, Selector: "plan in (gold"})
	assert.ErrorContains(t, err, `the plan's clusterSelector "plan in (gold" is not a label selector`)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		schedules bool
		err       string
	}{
		{"default", false, ""},
		{"round-robin", true, ""},
		{"least-utilized", true, ""},
		{"label-selector", true, ""},
		{"capacity", true, ""},
		{"fastest", false, `no scheduler "fastest"; there are [default round-robin`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := scheduling.Parse(tc.name)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.schedules, s.Schedules())
		})
	}
	assert.False(t, scheduling.Scheduler("").Schedules(), "no scheduler at all is the default")
}

// TestPlaceSeesEarlierDecisions: decisions taken together, each placed
// before the next, spread like decisions taken one by one and never
// overshoot the limit.
func TestPlaceSeesEarlierDecisions(t *testing.T) {
	clusters := []scheduling.Cluster{
		{Name: "eu-1", Ready: true, Capacity: list("4", ""), Requests: list("1", ""), LimitPercentage: 100},
		{Name: "eu-2", Ready: true, Capacity: list("4", ""), LimitPercentage: 100},
	}
	req := scheduling.Request{Scheduler: scheduling.Capacity, Demand: list("1", "")}
	var got []string
	for range 8 {
		d, err := scheduling.Schedule(clusters, req)
		require.NoError(t, err)
		got = append(got, d.Cluster)
		if d.Cluster != "" {
			scheduling.Place(clusters, d.Cluster, req.Demand)
		}
	}
	assert.Equal(t, []string{"eu-2", "eu-1", "eu-2", "eu-1", "eu-2", "eu-1", "eu-2", ""}, got)
	assert.Equal(t, 3, clusters[0].Instances)
	assert.Equal(t, 4, clusters[1].Instances)
	assert.True(t, clusters[0].Requests.Cpu().Equal(resource.MustParse("4")), "eu-1 full: %v", clusters[0].Requests.Cpu())
}
