package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
)

// TestBuildsCommand lists and routes the builds of a worker deployment
// with `qm builds`, as an operator ramps and rolls back by hand, on a dev
// server of the test's own with two builds' workers polling.
func TestBuildsCommand(t *testing.T) {
	temporal := testenv.NewLosableTemporal(t)
	kube := testenv.Kubernetes(t)
	for _, build := range []string{"b1", "b2"} {
		w := worker.New(temporal.Client(), worker.Activities{Kube: kube.Client},
			worker.Options{Versioning: worker.Versioning{Deployment: "qm-cli", BuildID: build}})
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	qm := func(args ...string) (string, error) {
		cmd := NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(append([]string{"builds"}, args...), "--deployment-name", "qm-cli", "--temporal-address", temporal.Address()))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	// routing is each build's ROUTING column, the unversioned workers' too.
	routing := func(t require.TestingT) map[string]string {
		out, err := qm()
		require.NoError(t, err, out)
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			f := strings.Fields(line)
			got[f[0]] = strings.Join(f[1:2], "")
		}
		return got
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"b1": "-", "b2": "-", "(unversioned)": "current"}, routing(c), "both builds known, none routed")
	}, 30*time.Second, 100*time.Millisecond)

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"current"}, "name one build, or --unversioned"},
		{[]string{"current", "b1", "--unversioned"}, "name one build, or --unversioned"},
		{[]string{"ramp", "b2", "150"}, `PERCENT "150": a number from 0 to 100`},
		{[]string{"current", "nope"}, "making build nope current"},
	} {
		out, err := qm(tc.args...)
		if assert.Error(t, err, "%v: %s", tc.args, out) {
			assert.Contains(t, err.Error(), tc.err, "%v", tc.args)
		}
	}

	_, _, err := worker.Builds(context.Background(), temporal.Client(), "nobody", nil)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "no worker deployment nobody: no versioned worker of it has polled yet")
	}

	out, err := qm("current", "b1")
	require.NoError(t, err, out)
	assert.Equal(t, "qm-cli routes to build b1\n", out)
	out, err = qm("ramp", "b2", "25")
	require.NoError(t, err, out)
	assert.Equal(t, "qm-cli routes 25% to build b2\n", out)
	out, _ = qm()
	assert.Regexp(t, `(?m)^b2\s+ramping 25%\s+0\s+0\s`, out)
	assert.Regexp(t, `(?m)^b1\s+current\s+0\s+0\s`, out)
	out, err = qm("ramp", "b2", "0")
	require.NoError(t, err, out)
	// As the chart's rollback hook: wait for the build's workers, then route.
	out, err = qm("current", "b2", "--wait", "30s")
	require.NoError(t, err, out)
	assert.Equal(t, "qm-cli routes to build b2\n", out)
	out, err = qm("current", "b3", "--wait", "1s")
	if assert.Error(t, err, out) {
		assert.Contains(t, err.Error(), "waiting for Temporal to know build b3")
	}
	out, err = qm("current", "--unversioned", "--wait", "30s")
	require.NoError(t, err, out)
	assert.Equal(t, "qm-cli routes to the unversioned workers\n", out)
	assert.Equal(t, map[string]string{"b1": "-", "b2": "-", "(unversioned)": "current"}, routing(t), "a rollback to unversioned workers")
}
