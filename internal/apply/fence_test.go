package apply

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFenceOvertakenBy(t *testing.T) {
	f := Fence{Generation: 2, PlanGeneration: 5}
	for _, c := range []struct {
		name  string
		fence Fence
		stamp string
		want  bool
	}{
		{"a newer generation", f, "uid-a/3/1", true},
		{"the same generation from a newer plan", f, "uid-a/2/6", true},
		{"the same render", f, "uid-a/2/5", false},
		{"an older plan", f, "uid-a/2/4", false},
		{"an older generation", f, "uid-a/1/9", false},
		{"another owner's stamp", f, "uid-b/9/9", false},
		{"an owner whose UID starts like ours", f, "uid-ab/9/9", false},
		{"no stamp", f, "", false},
		{"a stamp that does not parse", f, "uid-a/x/1", false},
		{"the zero fence fences nothing", Fence{}, "uid-a/9/9", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.fence.overtakenBy(c.stamp, "uid-a"))
		})
	}
}

func TestStampReadsBack(t *testing.T) {
	f := Fence{Generation: 7, PlanGeneration: 3}
	assert.Equal(t, "uid-a/7/3", f.stamp("uid-a"))
	assert.Equal(t, f, stampFence(f.stamp("uid-a")))
	assert.Equal(t, Fence{}, stampFence("not a stamp"))
}
