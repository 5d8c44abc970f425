package renderproc_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/renderproc"
	"github.com/quartermaster/qm/internal/testenv"
)

// The test binary is its own render process: this package's init serves
// jobs when QM_RENDER_PROCESS is set.

// TestRendersAsInProcess: a render process renders a gotemplate as the
// worker would, values and functions alike, and the registry values it
// sets come back: a second render sees the same generated password.
func TestRendersAsInProcess(t *testing.T) {
	pool := &renderproc.Pool{Size: 2}
	t.Cleanup(pool.Stop)
	reg, err := registry.Decode(registry.Instance, map[string][]byte{registry.KeyInstanceID: []byte(`"db-1"`)})
	require.NoError(t, err)
	tmpl := `{{ .instance.metadata.name }} {{ add .n 1 }} {{ generatePassword "admin" 12 }} {{ registry "instance-id" }} {{ .ratio }}`
	render := func() string {
		s := &plan.Subject{Registry: reg, Runner: pool, Plan: planWith(tmpl)}
		out, err := s.Text(osbv1alpha1.ActionProvision, plan.Values{"instance": map[string]any{"metadata": map[string]any{"name": "db-1"}}, "n": int64(41), "ratio": 0.5})
		require.NoError(t, err)
		return out
	}
	require.False(t, reg.Changed())
	first := render()
	fields := strings.Fields(first)
	require.Len(t, fields, 5, first)
	assert.Equal(t, []string{"db-1", "42"}, fields[:2], "values keep their types")
	assert.Len(t, fields[2], 12, "a generated password")
	assert.Equal(t, []string{"db-1", "0.5"}, fields[3:])
	assert.True(t, reg.Changed(), "the registry the render set is the subject's")
	assert.Equal(t, first, render(), "the password is generated once, and kept in the registry")

	// A stopped pool (the worker's end) leaves no process behind.
	pool.Stop()
	assertNoRenderProcessRuns(t)
}

// TestRenderProcessesStopForReal: a render no check inside it can stop (an
// integer range calls no function) is stopped with its process at its
// timeout; a chart whose heap grows past its bound stops its process; in
// both the error names the bound, and the next render works.
func TestRenderProcessesStopForReal(t *testing.T) {
	pool := &renderproc.Pool{Size: 1}
	t.Cleanup(pool.Stop)
	bounds := plan.Bounds{Timeout: 500 * time.Millisecond, MaxMemory: 16 << 20}

	start := time.Now()
	_, err := pool.Run(plan.Job{Name: "provision", Content: `{{ range 1000000000000 }}{{ end }}`, Bounds: withDefaults(bounds)})
	var bound *plan.BoundError
	require.ErrorAs(t, err, &bound)
	assert.Contains(t, err.Error(), "the render took longer than 500ms (--render-timeout)")
	assert.Less(t, time.Since(start), 3*time.Second, "stopped at its timeout")
	assertNoRenderProcessRuns(t)

	// Helm's engine calls sprig's repeat unguarded: a gigabyte at once.
	chart := testenv.ChartOf(t, "hungry", map[string]string{"templates/cm.yaml": `{{ repeat 1000000000 "x" | len }}`})
	_, err = pool.Run(plan.Job{Chart: chart, Release: plan.Release{Name: "r", Namespace: "ns"}, Bounds: withDefaults(plan.Bounds{Timeout: 30 * time.Second, MaxMemory: 16 << 20})})
	require.ErrorAs(t, err, &bound)
	assert.Equal(t, "the render used more than 67108864 bytes of memory (4 times --render-max-memory); its render process was stopped", err.Error())
	assertNoRenderProcessRuns(t)

	res, err := pool.Run(plan.Job{Name: "provision", Content: `ok {{ add 1 1 }}`, Bounds: withDefaults(bounds)})
	require.NoError(t, err)
	assert.Equal(t, "ok 2", res.Text, "a new render process serves the next render")
}

// planWith is a plan whose provision template is content.
func planWith(content string) *osbv1alpha1.SFPlan {
	return &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Templates: []osbv1alpha1.TemplateSpec{
		{Action: osbv1alpha1.ActionProvision, Type: osbv1alpha1.TemplateGo, Content: content}}}}
}

// withDefaults fills the bounds a Subject would.
func withDefaults(b plan.Bounds) plan.Bounds {
	if b.MaxOutput == 0 {
		b.MaxOutput = plan.DefaultRenderMaxOutput
	}
	return b
}

// assertNoRenderProcessRuns checks that no child of this process is alive:
// the stopped render process is gone, not left running.
func assertNoRenderProcessRuns(t *testing.T) {
	t.Helper()
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		kids, err := children()
		require.NoError(c, err)
		assert.Empty(c, kids, "no render process is left")
	}, 2*time.Second, 10*time.Millisecond)
}

// children are the live (not zombie) child processes of this one.
func children() ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or one that ended
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		if len(f) > 1 && f[1] == self && f[0] != "Z" {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
