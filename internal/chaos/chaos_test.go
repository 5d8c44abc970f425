package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/chaos"
)

func TestSchedule(t *testing.T) {
	a := chaos.Schedule(42, 10*time.Minute, 180, chaos.Kinds)
	b := chaos.Schedule(42, 10*time.Minute, 180, chaos.Kinds)
	assert.Equal(t, a, b, "a seed replays its run")
	assert.NotEqual(t, a, chaos.Schedule(43, 10*time.Minute, 180, chaos.Kinds), "another seed, another run")
	count := map[chaos.Kind]int{}
	var end time.Duration
	for _, f := range a {
		count[f.Kind]++
		assert.GreaterOrEqual(t, f.At, end, "faults do not overlap")
		end = f.At + f.For
		switch f.Kind {
		case chaos.StopKube:
			assert.LessOrEqual(t, f.For, 20*time.Second)
		case chaos.PauseWorker:
			assert.LessOrEqual(t, f.For, 30*time.Second)
		default:
			assert.LessOrEqual(t, f.For, 5*time.Second)
		}
	}
	for _, k := range chaos.Kinds {
		assert.Equal(t, 30, count[k], "%s comes 30 times", k)
	}
}

func TestScan(t *testing.T) {
	texts := map[string]string{
		"log of worker-1":      `level=INFO msg="provisioned" name=db-1`,
		"log of api":           `level=WARN msg="oops" password=s3cr3t-Pa55word`,
		"history sfsi/ns/db-1": `{"events":[{"input":"ns/db-1"}]}`,
	}
	hits := chaos.Scan(texts, []string{"s3cr3t-Pa55word", "db-1", "never-there-0000"})
	assert.Equal(t, []chaos.Hit{{Where: "log of api", Secret: "s3cr…"}}, hits, "a planted secret is found; short needles are skipped")
}

func TestReport(t *testing.T) {
	r := chaos.Report{Seed: 7, N: 10, Duration: time.Minute, Faults: map[chaos.Kind]int{chaos.KillWorker: 2},
		Operations: map[string]int{"provision": 10}, Recovery: map[chaos.Kind][]time.Duration{chaos.KillWorker: {time.Second, 3 * time.Second}},
		PeakRSS: map[string]int64{"worker": 100 << 20}, UnderFault: 15 * time.Second, Cut: 1}
	assert.Empty(t, r.Broken())
	var out strings.Builder
	r.Print(&out)
	assert.Contains(t, out.String(), "seed 7, N 10")
	assert.Regexp(t, `peak RSS of worker +100 MiB`, out.String())
	assert.Regexp(t, `kill a worker +p50 3s, p99 3s, over 2 faults`, out.String())
	assert.Regexp(t, `under a fault +15s of 1m0s \(25%\)`, out.String())
	assert.Regexp(t, `recoveries cut short by the next fault +1\n`, out.String())
	assert.NotContains(t, out.String(), "whatever struck meanwhile", "printed when measured")
	r.NextCompletion = map[chaos.Kind][]time.Duration{chaos.KillWorker: {time.Second, time.Minute}}
	out.Reset()
	r.Print(&out)
	assert.Regexp(t, `whatever struck meanwhile(.|\n)*kill a worker +p50 1m0s, p99 1m0s, over 2 faults`, out.String())
	r.RecoveryBound = 3 * time.Second
	assert.Empty(t, r.Broken(), "a p99 at the bound holds")
	r.Stuck, r.SecretHits, r.RecoveryBound = 1, 2, 2*time.Second
	assert.Equal(t, []string{"stuck: 1", "secrets found: 2", "recovery p99 3s over 2s"}, r.Broken())

	// A run on a Temporal cluster lists its own faults, and their
	// recoveries count against the bound.
	r = chaos.Report{Kinds: chaos.ClusterKinds, Faults: map[chaos.Kind]int{chaos.KillHistory: 1},
		Recovery: map[chaos.Kind][]time.Duration{chaos.KillHistory: {4 * time.Second}}, RecoveryBound: 3 * time.Second}
	out.Reset()
	r.Print(&out)
	assert.Regexp(t, `kill temporal's history service +1\n`, out.String())
	assert.Regexp(t, `restart postgresql +0\n`, out.String())
	assert.NotContains(t, out.String(), "kill a worker", "the dev server's faults are not this run's")
	assert.Equal(t, []string{"recovery p99 4s over 3s"}, r.Broken())
}

func TestRecoveries(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name        string
		faults      []chaos.Struck
		completions []time.Time
		want        map[chaos.Kind][]time.Duration
		cut         int
	}{
		{
			name:        "the next completion after the fault's end",
			faults:      []chaos.Struck{{chaos.KillWorker, at(0), at(2)}},
			completions: []time.Time{at(1), at(5), at(6)},
			want:        map[chaos.Kind][]time.Duration{chaos.KillWorker: {3 * time.Second}},
		},
		{
			name: "each fault recovered before the next struck",
			faults: []chaos.Struck{
				{chaos.KillTemporal, at(0), at(1)},
				{chaos.StopKube, at(4), at(24)},
			},
			completions: []time.Time{at(3), at(30)},
			want: map[chaos.Kind][]time.Duration{
				chaos.KillTemporal: {2 * time.Second},
				chaos.StopKube:     {6 * time.Second},
			},
		},
		{
			name: "the next fault struck first: cut short, counted to its strike",
			faults: []chaos.Struck{
				{chaos.KillAPI, at(0), at(1)},
				{chaos.PauseWorker, at(16), at(20)},
			},
			completions: []time.Time{at(18), at(21)},
			want: map[chaos.Kind][]time.Duration{
				chaos.KillAPI:     {15 * time.Second},
				chaos.PauseWorker: {time.Second},
			},
			cut: 1,
		},
		{
			name:        "no completion after the last fault: no recovery",
			faults:      []chaos.Struck{{chaos.KillWatcher, at(0), at(1)}},
			completions: []time.Time{at(0.5)},
			want:        map[chaos.Kind][]time.Duration{},
		},
		{
			name: "nothing left to complete after two faults: neither is measured",
			faults: []chaos.Struck{
				{chaos.KillWorker, at(0), at(1)},
				{chaos.KillTemporal, at(46), at(47)},
			},
			completions: []time.Time{at(0.5)},
			want:        map[chaos.Kind][]time.Duration{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := chaos.Recoveries(tc.faults, tc.completions)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.cut, cut)
		})
	}
}

// TestDue: the next fault waits for the one before to recover, or for its
// window to pass.
func TestDue(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	prev := &chaos.Struck{Kind: chaos.KillWorker, Start: at(0), End: at(2)}
	window := 15 * time.Second
	for _, tc := range []struct {
		name        string
		prev        *chaos.Struck
		completions []time.Time
		now         time.Time
		due         bool
	}{
		{name: "the first fault", now: at(0), due: true},
		{name: "nothing completed since its end", prev: prev, completions: []time.Time{at(1)}, now: at(10), due: false},
		{name: "nothing completed at all", prev: prev, now: at(10), due: false},
		{name: "an operation completed since its end", prev: prev, completions: []time.Time{at(1), at(3)}, now: at(4), due: true},
		{name: "its window passed", prev: prev, completions: []time.Time{at(1)}, now: at(17), due: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.due, chaos.Due(tc.prev, tc.completions, tc.now, window))
		})
	}
}

func TestUnderFault(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	faults := []chaos.Struck{{chaos.KillWorker, t0, t0.Add(2 * time.Second)}, {chaos.StopKube, t0.Add(10 * time.Second), t0.Add(30 * time.Second)}}
	assert.Equal(t, 22*time.Second, chaos.UnderFault(faults))
	assert.Zero(t, chaos.UnderFault(nil))
}
