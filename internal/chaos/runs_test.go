package chaos_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/chaos"
)

func TestExactlyOnce(t *testing.T) {
	run := func(op string, gen int64) chaos.Run { return chaos.Run{Operation: op, Generation: gen} }
	replay := func(op string, found int64) chaos.Run { return chaos.Run{Operation: op, FoundDone: found} }
	updated := chaos.Expected{Creates: "provision", Updates: 1, Removed: true}
	for _, tc := range []struct {
		name string
		runs []chaos.Run
		want chaos.Expected
		bad  []string
	}{
		{"each operation once", []chaos.Run{run("provision", 1), run("update", 2), run("deprovision", 2)}, updated, nil},
		{"the update applied by a create taken over", []chaos.Run{run("provision", 2), run("deprovision", 2)}, updated, nil},
		{"a run that found its resource gone does not count",
			[]chaos.Run{run("provision", 1), run("update", 2), run("deprovision", 2), run("provision", 0)}, updated, nil},
		{"a removal replayed after its lost completion", []chaos.Run{run("bind", 1), run("unbind", 0)}, chaos.Expected{Creates: "bind", Removed: true}, nil},
		{"a create replayed after its lost completion, the update applied by it", []chaos.Run{run("deprovision", 3), run("update", 2), run("provision", 0)}, updated, nil},
		{"a binding bound and kept", []chaos.Run{run("bind", 1)}, chaos.Expected{Creates: "bind"}, nil},
		{"two deprovisions", []chaos.Run{run("provision", 1), run("update", 2), run("deprovision", 2), run("deprovision", 2)}, updated,
			[]string{"2 completed deprovision runs, want 1"}},
		{"no create", []chaos.Run{run("update", 2), run("deprovision", 2)}, updated,
			[]string{"0 completed provision runs, want 1"}},
		{"a generation applied twice", []chaos.Run{run("provision", 1), run("update", 2), run("update", 2), run("deprovision", 2)}, updated,
			[]string{"2 completed update runs, want 1", "generation 2 applied twice"}},
		{"an update replayed after its lost completion", []chaos.Run{run("provision", 1), replay("update", 2), run("deprovision", 3)}, updated, nil},
		{"an update applied, and a later start of it finding it done", []chaos.Run{run("provision", 1), run("update", 2), replay("update", 2), run("deprovision", 3)}, updated, nil},
		{"an update begun after the deletion, having found nothing done", []chaos.Run{run("provision", 1), run("update", 0), run("deprovision", 3)}, updated,
			[]string{"the last generation applied is 1, want 2"}},
		{"a replay that found only an earlier generation done", []chaos.Run{run("provision", 1), replay("update", 1), run("deprovision", 3)}, updated,
			[]string{"the last generation applied is 1, want 2"}},
		{"the update never applied", []chaos.Run{run("provision", 1), run("deprovision", 2)}, updated,
			[]string{"the last generation applied is 1, want 2"}},
		{"a removal of a resource that stays", []chaos.Run{run("bind", 1), run("unbind", 1)}, chaos.Expected{Creates: "bind"},
			[]string{"1 completed unbind runs, want 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.bad, chaos.ExactlyOnce(tc.runs, tc.want))
		})
	}
}
