package limits_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/limits"
)

func TestAdmit(t *testing.T) {
	plan := limits.Limit{Of: `plan "small"`, Max: 3}
	for _, tc := range []struct {
		name  string
		limit limits.Limit
		count int
		want  string
	}{
		{"below", plan, 2, ""},
		{"at the limit", plan, 3, `plan "small" allows at most 3 instances, and 3 exist: deprovision one, or ask the operator for a higher limit`},
		{"past it (lowered since)", plan, 5, `plan "small" allows at most 3 instances, and 5 exist`},
		{"one", limits.Limit{Of: `organization "o"`, Max: 1}, 1, `organization "o" allows at most 1 instance, and 1 exists: `},
		{"no limit", limits.Limit{Of: "x"}, 1000, ""},
		{"a negative limit is none", limits.Limit{Of: "x", Max: -1}, 1000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := limits.Admit(tc.limit, tc.count)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			var exceeded *limits.Exceeded
			require.ErrorAs(t, err, &exceeded)
			assert.Equal(t, tc.limit, exceeded.Limit)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestPlace(t *testing.T) {
	at := func(ns, name string) limits.Instance { return limits.Instance{Namespace: ns, Name: name} }
	deleting := func(i limits.Instance) limits.Instance { i.Deleting = true; return i }
	two := limits.Limit{Of: `plan "small"`, Max: 2}
	a, b, c := at("x", "a"), at("x", "b"), at("y", "a")
	for _, tc := range []struct {
		name  string
		limit limits.Limit
		all   []limits.Instance
		me    limits.Instance
		fits  bool
		count int
	}{
		{"one other", two, []limits.Instance{a, b}, b, true, 0},
		{"two others", two, []limits.Instance{a, b, c}, c, false, 2},
		{"each of three at once sees two others: none passes the limit", two, []limits.Instance{a, b, c}, a, false, 2},
		{"not yet listed itself", two, []limits.Instance{a, b}, c, false, 2},
		{"one being deleted makes room", two, []limits.Instance{deleting(a), b, c}, c, true, 0},
		{"the same name in another namespace is another", two, []limits.Instance{a, c}, c, true, 0},
		{"no limit", limits.Limit{Of: "x"}, []limits.Instance{a, b, c}, c, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := limits.Place(tc.limit, tc.all, tc.me)
			if tc.fits {
				assert.NoError(t, err)
				return
			}
			var exceeded *limits.Exceeded
			require.ErrorAs(t, err, &exceeded)
			assert.Equal(t, tc.count, exceeded.Count, "the other instances that hold the limit")
		})
	}
}

// A limit's lock serializes its holders, and is forgotten once the last
// lets go, so that an API seeing a million organizations keeps none.
func TestLocks(t *testing.T) {
	var locks limits.Locks
	unlock := locks.Lock("org/a")
	other := locks.Lock("org/b") // another key: not held up
	assert.Equal(t, 2, locks.Held())
	other()

	got := make(chan struct{})
	go func() {
		defer close(got)
		locks.Lock("org/a")()
	}()
	assert.Never(t, func() bool {
		select {
		case <-got:
			return true
		default:
			return false
		}
	}, 50*time.Millisecond, 5*time.Millisecond, "a second holder took a held lock")
	unlock()
	<-got
	assert.Zero(t, locks.Held(), "no lock kept after its last holder")
}
