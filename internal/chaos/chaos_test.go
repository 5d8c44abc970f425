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
		PeakRSS: map[string]int64{"worker": 100 << 20}}
	assert.Empty(t, r.Broken())
	var out strings.Builder
	r.Print(&out)
	assert.Contains(t, out.String(), "seed 7, N 10")
	assert.Regexp(t, `peak RSS of worker +100 MiB`, out.String())
	assert.Regexp(t, `kill a worker +p50 3s, p99 3s, over 2 faults`, out.String())
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
	}{
		{
			name:        "the next completion after the fault's end",
			faults:      []chaos.Struck{{chaos.KillWorker, at(0), at(2)}},
			completions: []time.Time{at(1), at(5), at(6)},
			want:        map[chaos.Kind][]time.Duration{chaos.KillWorker: {3 * time.Second}},
		},
		{
			name: "a later fault's downtime is its own",
			faults: []chaos.Struck{
				{chaos.KillTemporal, at(0), at(1)},
				{chaos.StopKube, at(2), at(22)},
			},
			completions: []time.Time{at(30)},
			want: map[chaos.Kind][]time.Duration{
				chaos.KillTemporal: {9 * time.Second}, // 29 s, less the 20 s the API server was down
				chaos.StopKube:     {8 * time.Second},
			},
		},
		{
			name: "a later fault still in force at the completion did not hold it up",
			faults: []chaos.Struck{
				{chaos.KillAPI, at(0), at(1)},
				{chaos.PauseWorker, at(3), at(20)},
			},
			completions: []time.Time{at(5), at(21)},
			want: map[chaos.Kind][]time.Duration{
				chaos.KillAPI:     {4 * time.Second},
				chaos.PauseWorker: {time.Second},
			},
		},
		{
			name:        "no completion after the fault: no recovery",
			faults:      []chaos.Struck{{chaos.KillWatcher, at(0), at(1)}},
			completions: []time.Time{at(0.5)},
			want:        map[chaos.Kind][]time.Duration{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, chaos.Recoveries(tc.faults, tc.completions))
		})
	}
}
