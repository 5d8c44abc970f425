package healthcheck

import (
	"hash/fnv"
	"time"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Shards is how many loops share the registered services: a service's
// checks run in loop Shard(namespace, name). It is fixed, because a
// service must stay in its loop across releases.
const Shards = 16

// Shard is the loop of the service namespace/name.
func Shard(namespace, name string) int { return ShardOf(namespace, name, Shards) }

// ShardOf is which of shards loops the resource namespace/name falls in,
// by a hash that never changes across releases (the drift checks' loops
// share instances the same way).
func ShardOf(namespace, name string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(shards))
}

// Interval is the time between two checks of hc, minutes long each (a
// minute but in tests and demos).
func Interval(hc *primazav1alpha1.HealthCheck, minute time.Duration) time.Duration {
	var m int32
	switch {
	case hc.Container != nil:
		m = hc.Container.Minutes
	case hc.TCP != nil:
		m = hc.TCP.Minutes
	case hc.HTTP != nil:
		m = hc.HTTP.Minutes
	}
	if m < 1 {
		m = 5
	}
	return time.Duration(m) * minute
}

// Due says whether a check of the service with uid, every interval, falls
// in (from, to]. Each service checks at its own offset within the
// interval, taken from its uid, so that many services spread their checks
// evenly instead of all checking at the top of the minute; and the
// schedule is a function of the spec alone, so that a new interval holds
// from the next pass.
func Due(uid string, interval time.Duration, from, to time.Time) bool {
	if interval <= 0 || !to.After(from) {
		return false
	}
	h := fnv.New64a()
	h.Write([]byte(uid))
	offset := int64(h.Sum64() % uint64(interval))
	slot := func(t time.Time) int64 { return floorDiv(t.UnixNano()-offset, int64(interval)) }
	return slot(to) > slot(from)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
