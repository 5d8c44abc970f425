package chaos_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/internal/chaos"
)

func TestExactlyOnce(t *testing.T) {
	updated := chaos.Expected{Creates: "provision", Updates: 1, Removed: true}
	for _, tc := range []struct {
		name string
		runs []chaos.Run
		want chaos.Expected
		bad  []string
	}{
		{"each operation once", []chaos.Run{{"provision", 1}, {"update", 2}, {"deprovision", 2}}, updated, nil},
		{"the update applied by a create taken over", []chaos.Run{{"provision", 2}, {"deprovision", 2}}, updated, nil},
		{"a run that found its resource gone does not count",
			[]chaos.Run{{"provision", 1}, {"update", 2}, {"deprovision", 2}, {"provision", 0}}, updated, nil},
		{"a removal replayed after its lost completion", []chaos.Run{{"bind", 1}, {"unbind", 0}}, chaos.Expected{Creates: "bind", Removed: true}, nil},
		{"a create replayed after its lost completion, the update applied by it", []chaos.Run{{"deprovision", 3}, {"update", 2}, {"provision", 0}}, updated, nil},
		{"a binding bound and kept", []chaos.Run{{"bind", 1}}, chaos.Expected{Creates: "bind"}, nil},
		{"two deprovisions", []chaos.Run{{"provision", 1}, {"update", 2}, {"deprovision", 2}, {"deprovision", 2}}, updated,
			[]string{"2 completed deprovision runs, want 1"}},
		{"no create", []chaos.Run{{"update", 2}, {"deprovision", 2}}, updated,
			[]string{"0 completed provision runs, want 1"}},
		{"a generation applied twice", []chaos.Run{{"provision", 1}, {"update", 2}, {"update", 2}, {"deprovision", 2}}, updated,
			[]string{"2 completed update runs, want 1", "generation 2 applied twice"}},
		{"the update never applied", []chaos.Run{{"provision", 1}, {"deprovision", 2}}, updated,
			[]string{"the last generation applied is 1, want 2"}},
		{"a removal of a resource that stays", []chaos.Run{{"bind", 1}, {"unbind", 1}}, chaos.Expected{Creates: "bind"},
			[]string{"1 completed unbind runs, want 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.bad, chaos.ExactlyOnce(tc.runs, tc.want))
		})
	}
}
