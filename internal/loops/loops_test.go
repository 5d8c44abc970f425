package loops_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/loops"
)

func TestSuspects(t *testing.T) {
	want := []loops.Want{{ID: "serviceclaim/b/2"}, {ID: "serviceclaim/a/1"}, {ID: "serviceclaim/c/3"}}
	for _, tc := range []struct {
		name   string
		listed map[string]bool
		want   []string
	}{
		{"visibility lists every run", map[string]bool{"serviceclaim/a/1": true, "serviceclaim/b/2": true, "serviceclaim/c/3": true}, nil},
		{"Temporal lost every run: all, in ID order", nil, []string{"serviceclaim/a/1", "serviceclaim/b/2", "serviceclaim/c/3"}},
		{"one not listed", map[string]bool{"serviceclaim/a/1": true, "serviceclaim/c/3": true}, []string{"serviceclaim/b/2"}},
		{"a run of no resource listed is no suspect", map[string]bool{"serviceclaim/a/1": true, "serviceclaim/b/2": true, "serviceclaim/c/3": true,
			"serviceclaim/gone/4": true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, w := range loops.Suspects(want, tc.listed) {
				ids = append(ids, w.ID)
			}
			assert.Equal(t, tc.want, ids)
		})
	}
}

func TestDecide(t *testing.T) {
	live, deleting := loops.Want{ID: "x"}, loops.Want{ID: "x", Deleting: true}
	for _, tc := range []struct {
		name        string
		want        loops.Want
		status      loops.Status
		endedCounts bool
		start       bool
	}{
		{"no run: start it", live, loops.NotFound, false, true},
		{"a run visibility did not list yet goes on", live, loops.Running, false, false},
		{"a loop that completed while its resource lives: start it", live, loops.Completed, false, true},
		{"a loop terminated by hand: start it", live, loops.Ended, false, true},
		{"a deleting resource's run that completed released it", deleting, loops.Completed, false, false},
		{"a deleting resource's run that failed left its finalizer: start it", deleting, loops.Ended, false, true},
		{"a deleting resource with no run: start it", deleting, loops.NotFound, false, true},
		{"a one-off run Temporal lost: start it", live, loops.NotFound, true, true},
		{"a one-off run that completed is done", live, loops.Completed, true, false},
		{"a one-off run that failed or was cancelled is the operator's", live, loops.Ended, true, false},
		{"a one-off run that goes on", live, loops.Running, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.start, loops.Decide(tc.want, tc.status, tc.endedCounts))
		})
	}
}
