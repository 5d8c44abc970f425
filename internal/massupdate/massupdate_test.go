package massupdate

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

func TestSelectorValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  Selector
		err  string
	}{
		{"plans", Selector{PlanIDs: []string{"p"}}, ""},
		{"labels and namespace", Selector{Namespace: "apps", Labels: "tier=gold"}, ""},
		{"all", Selector{All: true}, ""},
		{"nothing", Selector{}, "select instances with plans, service, namespace or selector, or all: true for every instance"},
		{"all and more", Selector{All: true, ServiceID: "s"}, "all: true selects every instance; give it without plans, service, namespace or selector"},
		{"bad labels", Selector{Labels: "tier in (gold"}, `selector "tier in (gold": unable to parse requirement: found '', expected: ',' or ')'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate()
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tc.err)
			}
		})
	}
}

func TestMatchesAndCurrent(t *testing.T) {
	inst := &osbv1alpha1.SFServiceInstance{Spec: osbv1alpha1.SFServiceInstanceSpec{PlanID: "gold", ServiceID: "db"}}
	inst.Status.AppliedPlanGeneration = 3
	assert.True(t, Selector{PlanIDs: []string{"silver", "gold"}}.Matches(inst))
	assert.False(t, Selector{PlanIDs: []string{"silver"}}.Matches(inst))
	assert.True(t, Selector{ServiceID: "db"}.Matches(inst))
	assert.False(t, Selector{ServiceID: "cache"}.Matches(inst))
	assert.True(t, Selector{All: true}.Matches(inst))
	assert.True(t, Current(inst, 3))
	assert.False(t, Current(inst, 4))
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		in    string
		total int
		limit int
		err   string
	}{
		{"", 100, 0, ""},
		{"5", 100, 5, ""},
		{"10%", 100, 10, ""},
		{"10%", 5, 1, ""}, // rounds up
		{"0", 0, 0, `maxFailures "0": give a count of at least 1 ("5") or a percentage ("10%")`},
		{"ten", 0, 0, `maxFailures "ten": give a count of at least 1 ("5") or a percentage ("10%")`},
		{"150%", 0, 0, `maxFailures "150%": a percentage is at most 100%`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			b, err := ParseBudget(tc.in)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.limit, b.Limit(tc.total))
			if tc.in != "" {
				assert.Equal(t, tc.in, b.String())
			}
		})
	}
}

func TestProgress(t *testing.T) {
	start := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	p := Progress{State: Running, Total: 120, Succeeded: 50, Failed: 10, Skipped: 20, InFlight: 10, Remaining: 30, Started: start}
	p.Measure(start.Add(30 * time.Second))
	assert.InDelta(t, 2.0, p.Rate, 1e-9)
	assert.Equal(t, 20*time.Second, p.ETA)
	assert.Equal(t, "running: 80/120 (50 succeeded, 10 failed, 20 skipped), 10 in flight, 2.0/s, ETA 20s", p.Line())
	p.State, p.Reason = Paused, "paused by the operator"
	assert.Equal(t, "paused: 80/120 (50 succeeded, 10 failed, 20 skipped), 10 in flight, 2.0/s; paused by the operator", p.Line())
}

func TestTargetsJSON(t *testing.T) {
	var ts Targets
	for i := range 10000 {
		ts = append(ts, Target{Namespace: fmt.Sprintf("team-%d", i/5000), Name: fmt.Sprintf("instance-%05d", i), PlanID: "8a1e4c6f-2b3d-4e5f-9a7b-1c2d3e4f5a61"})
	}
	raw, err := json.Marshal(Selection{Targets: ts, Skipped: 3})
	require.NoError(t, err)
	assert.Less(t, len(raw), 200_000, "names only, grouped")
	var back Selection
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, ts, back.Targets, "order and fields kept")
	assert.Equal(t, 3, back.Skipped)
	raw, err = json.Marshal(Targets{})
	require.NoError(t, err)
	assert.JSONEq(t, "[]", string(raw))
	// Histories recorded before the grouping listed the targets one by one.
	var old Targets
	require.NoError(t, json.Unmarshal([]byte(`[{"ns":"a","name":"x","plan":"p"},{"ns":"b","name":"y","plan":"q"}]`), &old))
	assert.Equal(t, Targets{{Namespace: "a", Name: "x", PlanID: "p"}, {Namespace: "b", Name: "y", PlanID: "q"}}, old)
}
