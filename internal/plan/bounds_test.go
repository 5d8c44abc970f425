package plan_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestRenderBounds: each abusive template fails its render with a message
// that names the bound, on time and without holding the memory it asked
// for; a template within its bounds renders.
func TestRenderBounds(t *testing.T) {
	// Ample time, so that each template meets the bound it is about
	// (on a loaded machine, with the race detector); the endless loops meet
	// a short one.
	bounds, short := plan.Bounds{Timeout: 20 * time.Second}, plan.Bounds{Timeout: 500 * time.Millisecond}
	for _, tc := range []struct {
		name, tmpl string
		want       string
		bound      bool // a *plan.BoundError, not text/template's own limit
	}{
		{"a huge range", `{{ range until 100000000 }}{{ end }}`, "until would make more than the 67108864 bytes a render may (--render-max-memory)", true},
		{"a range in steps", `{{ range untilStep 0 1000000000 1 }}{{ end }}`, "untilStep would make more than", true},
		{"a template that calls itself", `{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`, "exceeded maximum template depth (100000)", false},
		{"hundreds of MiB of output", `{{ range until 1000 }}{{ repeat 1000000 "x" }}{{ end }}`, "the render wrote more than 8388608 bytes (--render-max-output)", true},
		{"one huge string", `{{ $s := repeat 500000000 "x" }}`, "repeat would make more than", true},
		{"a string that doubles", `{{ $s := "xxxxxxxx" }}{{ range until 40 }}{{ $s = cat $s $s }}{{ end }}`, "the render would make more than 67108864 bytes (--render-max-memory)", true},
		{"a printf width", `{{ printf "%0999999999d" 1 }}`, "printf would make more than", true},
		{"a printf width from the data", `{{ printf "%*d" 999999999 1 }}`, "printf would make more than", true},
		{"an endless loop of calls", `{{ range until 100000 }}{{ range until 100000 }}{{ add 1 1 }}{{ end }}{{ end }}`, "the render took longer than 500ms (--render-timeout)", true},
		{"an endless loop of output", `{{ range until 100000 }}{{ range until 100000 }}x{{ end }}{{ end }}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			b := bounds
			if strings.HasPrefix(tc.name, "an endless loop") {
				b = short
			}
			_, err := plan.Go("provision", tc.tmpl, nil, plan.FuncMap(), b)
			took := time.Since(start)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var be *plan.BoundError
			assert.Equal(t, tc.bound, errors.As(err, &be), "a *BoundError: %v", err)
			assert.Less(t, took, b.Timeout+time.Second, "it fails on time")
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			assert.Less(t, int64(after.TotalAlloc-before.TotalAlloc), int64(1<<30), "it allocated less than 1 GiB in all")
		})
	}

	out, err := plan.Go("provision", `{{ range until 3 }}{{ printf "%05d" . }} {{ end }}{{ repeat 3 "ab" }}`, nil, plan.FuncMap(), plan.Bounds{})
	require.NoError(t, err)
	assert.Equal(t, "00000 00001 00002 ababab", out, "within its bounds, a template renders")
}

// TestChartRenderBounds: a chart is bounded in output too.
func TestChartRenderBounds(t *testing.T) {
	ch, err := plan.LoadChart(testenv.ChartArchive(t))
	require.NoError(t, err)
	vars := plan.Values{
		"plan":     map[string]any{"spec": map[string]any{"name": "small"}},
		"instance": map[string]any{"metadata": map[string]any{"name": "i-1"}},
	}
	_, err = plan.Helm(ch, plan.Release{Name: "i-1", Namespace: "tenant-a"}, nil, vars, plan.Bounds{MaxOutput: 100})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the render wrote more than 100 bytes (--render-max-output)")
}
