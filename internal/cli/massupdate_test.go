package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sys/unix"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// massFleetAtVersion2 provisions six instances of a plan named mass,
// prefix-0 to prefix-5 with parameters(i), then changes the plan, so that a
// mass update has six to bring to its second version. qm runs `qm
// mass-update` against the System's API with the admin credentials,
// writing to out.
func massFleetAtVersion2(t *testing.T, prefix string, parameters func(i int) string) (s *testenv.System, planID string, qm func(out io.Writer, args ...string) error) {
	t.Helper()
	s = testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, API: true})
	planID = s.Plan("mass", "  context: {version: \"1\"}\n", testenv.Templates("mass"))
	for i := range 6 {
		s.Instance(fmt.Sprintf("%s-%d", prefix, i), planID, parameters(i))
		s.WaitInstance(fmt.Sprintf("%s-%d", prefix, i), "provisioned", testenv.Succeeded(1))
	}
	var plan osbv1alpha1.SFPlan
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "mass"}, &plan))
	base := plan.DeepCopy()
	plan.Spec.Context.Raw = []byte(`{"version":"2"}`)
	require.NoError(t, s.Kube.Client.Patch(context.Background(), &plan, ctrlclient.MergeFrom(base)))
	s.WaitPlanGeneration(planID, plan.Generation)

	t.Setenv("QM_ADMIN_USERNAME", testenv.AdminCredentials.Username)
	t.Setenv("QM_ADMIN_PASSWORD", testenv.AdminCredentials.Password)
	qm = func(out io.Writer, args ...string) error {
		cmd := NewRootCommand()
		cmd.SetOut(out)
		cmd.SetErr(out)
		cmd.SetArgs(append([]string{"mass-update", "--url", s.AdminURL}, args...))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return cmd.ExecuteContext(ctx)
	}
	return s, planID, qm
}

// TestMassUpdateCommand runs `qm mass-update` as an operator would: a dry
// run, a start that waits (one line per change on a pipe, a non-zero exit
// when updates failed), status and list.
func TestMassUpdateCommand(t *testing.T) {
	s, planID, qmTo := massFleetAtVersion2(t, "cli", func(i int) string {
		if i == 5 {
			return `{"fragile": true}`
		}
		return ""
	})
	qm := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := qmTo(&out, args...)
		return out.String(), err
	}

	out, err := qm("start", "--plan", planID, "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, s.Namespace+"/cli-0\n")
	assert.Contains(t, out, "would update 6 of 6 instances (0 current already); nothing was changed")

	name := s.Namespace + "/cli"
	out, err = qm("start", "--name", name, "--plan", planID, "--concurrency", "2", "--wait")
	require.EqualError(t, err, "1 updates failed", out)
	assert.Contains(t, out, "started mass update "+name)
	assert.Contains(t, out, "completed: 6/6 (5 succeeded, 1 failed, 0 skipped), 0 in flight")
	assert.Contains(t, out, "failed "+s.Namespace+"/cli-5: ")
	assert.Contains(t, out, "version 2 cannot run a fragile instance")
	assert.NotContains(t, out, "\r", "a pipe gets lines, not a bar")

	out, err = qm("status", name)
	require.Error(t, err)
	assert.Contains(t, out, name+" (completed): completed: 6/6")

	out, err = qm("list")
	require.NoError(t, err, out)
	assert.Regexp(t, name+` +completed`, out)

	out, err = qm("pause", name)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "409 Conflict: mass update "+name+" is completed")

	cmd := NewRootCommand()
	cmd.SetArgs([]string{"mass-update", "--url", s.AdminURL, "--password", "wrong", "list"})
	cmd.SetOut(&bytes.Buffer{})
	err = cmd.ExecuteContext(context.Background())
	assert.ErrorContains(t, err, "the admin API refused the credentials")
}

// TestMassUpdateCanaryRateAndBar: `--canary` and `--rate` reach the run:
// it pauses after the canary saying so, and its input carries the rate; on
// a terminal, `status --watch` draws a bar that it redraws in place.
func TestMassUpdateCanaryRateAndBar(t *testing.T) {
	s, planID, qm := massFleetAtVersion2(t, "bar", func(int) string { return "" })

	name := s.Namespace + "/canary"
	var out bytes.Buffer
	require.NoError(t, qm(&out, "start", "--name", name, "--plan", planID, "--canary", "2", "--rate", "4"), out.String())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var status bytes.Buffer
		assert.NoError(c, qm(&status, "status", name))
		assert.Contains(c, status.String(), name+" (running): paused: 2/6")
		assert.Contains(c, status.String(), "canary: 2 updated; resume to update the other 4")
	}, time.Minute, 200*time.Millisecond, "the run pauses after its canary")
	h := s.History(runs.MassUpdateID(name), "")
	assert.Contains(t, testenv.HistoryText(h), `"rate":4`, "the run's input carries the rate")

	require.NoError(t, qm(&out, "resume", name), out.String())
	terminal, screen := openTerminal(t)
	require.NoError(t, qm(terminal, "status", name, "--watch"))
	require.NoError(t, terminal.Close())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, screen.String(), "\r\x1b[K[", "the bar is redrawn in place")
		assert.Contains(c, screen.String(), "[##############################] completed: 6/6 (6 succeeded, 0 failed, 0 skipped)")
	}, 10*time.Second, 20*time.Millisecond, "the terminal shows the bar")

	// Who started it and who steered it, as the admin API authenticated
	// them: in the status, and in the run's memo.
	out.Reset()
	require.NoError(t, qm(&out, "status", name), out.String())
	assert.Regexp(t, `\n  started by admin `+testenv.AdminCredentials.Username+` at \d{4}-`, out.String())
	assert.Regexp(t, `\n  resume by admin `+testenv.AdminCredentials.Username+` at \d{4}-`, out.String())
	d, err := s.Temporal.DescribeWorkflowExecution(context.Background(), runs.MassUpdateID(name), "")
	require.NoError(t, err)
	var by string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(d.GetWorkflowExecutionInfo().GetMemo().GetFields()[runs.MemoStartedBy], &by))
	assert.Equal(t, "admin "+testenv.AdminCredentials.Username, by)
}

// openTerminal opens a pseudo-terminal: what is written to the returned
// file is read back, as a terminal would show it, into the buffer.
func openTerminal(t *testing.T) (*os.File, *testenv.SyncBuffer) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ptmx.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0), "unlocking the terminal")
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	screen := &testenv.SyncBuffer{}
	go func() { _, _ = io.Copy(screen, ptmx) }()
	return tty, screen
}
