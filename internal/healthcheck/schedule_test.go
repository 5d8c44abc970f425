package healthcheck

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// TestDueOncePerInterval: over any run of passes, a service is due once
// per interval, whatever the passes' length.
func TestDueOncePerInterval(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 7, 0, time.UTC)
	for _, tc := range []struct {
		interval, tick time.Duration
	}{{time.Minute, 5 * time.Second}, {5 * time.Minute, 5 * time.Second}, {time.Minute, 7 * time.Second}, {2 * time.Second, 250 * time.Millisecond}} {
		t.Run(fmt.Sprint(tc.interval, "/", tc.tick), func(t *testing.T) {
			for _, uid := range []string{"a", "b", "c", "4f1c"} {
				n := 0
				for from := start; from.Before(start.Add(10 * tc.interval)); from = from.Add(tc.tick) {
					if Due(uid, tc.interval, from, from.Add(tc.tick)) {
						n++
					}
				}
				assert.InDelta(t, 10, n, 1, "service %s", uid)
			}
		})
	}
}

// TestDueSpreads: services check at different offsets.
func TestDueSpreads(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	perSecond := map[int]int{}
	for i := range 600 {
		for s := range 60 {
			from := start.Add(time.Duration(s) * time.Second)
			if Due(fmt.Sprint("uid-", i), time.Minute, from, from.Add(time.Second)) {
				perSecond[s]++
			}
		}
	}
	for s, n := range perSecond {
		assert.Less(t, n, 30, "second %d has %d of 600 checks", s, n)
	}
}

// TestIntervalChangeHoldsAtOnce: after a change from 5 minutes to 1, the
// next check is due within a minute, not at the end of the old interval.
func TestIntervalChangeHoldsAtOnce(t *testing.T) {
	hc := &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{Minutes: 5}}
	assert.Equal(t, 5*time.Minute, Interval(hc, time.Minute))
	hc.TCP.Minutes = 1
	from := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	assert.True(t, Due("svc", Interval(hc, time.Minute), from, from.Add(time.Minute)))
	assert.Equal(t, 5*time.Second, Interval(&primazav1alpha1.HealthCheck{Container: &primazav1alpha1.HealthCheckContainer{}}, time.Second), "5 minutes by default")
}

func TestShardIsStable(t *testing.T) {
	// The shard names a loop's workflow ID, so it must not change across
	// processes or releases: these are its values today.
	assert.Equal(t, 11, Shard("ns", "svc"))
	assert.Equal(t, 8, Shard("default", "postgres"))
	seen := map[int]bool{}
	for i := range 200 {
		s := Shard("ns", fmt.Sprint("svc-", i))
		assert.True(t, s >= 0 && s < Shards)
		seen[s] = true
	}
	assert.Len(t, seen, Shards, "200 services reach every shard")
}
