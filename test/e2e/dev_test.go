package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/testenv"
)

// devBurst is how many provisions are in flight when the dev server dies.
const devBurst = 20

// TestDevSurvivesItsChildrenAndItself runs `qm dev` as a user does, and
// hurts it twice. Its Temporal dev server is killed in the middle of a burst
// of provisions: qm dev says so, starts it again on the same data, and every
// instance succeeds with no action by the user. Then qm dev itself is
// killed with SIGKILL: etcd, kube-apiserver and Temporal die with it, and a
// new qm dev, started at once on the same ports, comes up.
func TestDevSurvivesItsChildrenAndItself(t *testing.T) {
	qm := buildQM(t)
	binDir := os.Getenv("QM_BIN_DIR")
	require.NotEmpty(t, binDir, "QM_BIN_DIR names the tools (make test sets it)")
	data := t.TempDir()
	ports := freePorts(t, 5)
	args := []string{"dev", "--bin-dir", binDir, "--data-dir", data, "--kube-port", ports[0], "--temporal-port", ports[1],
		"--ui-port", ports[2], "--listen", "127.0.0.1:" + ports[3], "--admin-listen", "127.0.0.1:" + ports[4], "--api-metrics-listen", ""}
	dev := start(t, qm, "qm-dev", nil, args...)
	waitFor(t, dev, "Quartermaster is running.", 3*time.Minute)

	var osb api.Credentials
	raw, err := os.ReadFile(filepath.Join(data, "osb-credentials.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &osb))
	url := "http://127.0.0.1:" + ports[3] + "/v2/service_instances/"
	provision := func(name string) {
		status, body, _ := testenv.HTTP(http.MethodPut, url+name+"?accepts_incomplete=true",
			fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`,
				testenv.KeyValueService, testenv.KeyValuePlan), &osb, testenv.OSBHeader)
		assert.Equal(t, http.StatusAccepted, status, "PUT %s: %s", name, body)
	}

	// The dev server dies in the middle of a burst.
	for i := range devBurst / 2 {
		provision(fmt.Sprintf("burst-%02d", i))
	}
	pid, ok := childproc.Running(filepath.Join(data, "temporal", "pids", "temporal.pid"))
	require.True(t, ok, "the dev server runs as a child of qm dev")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for i := devBurst / 2; i < devBurst; i++ {
		provision(fmt.Sprintf("burst-%02d", i))
	}
	waitFor(t, dev, fmt.Sprintf("The Temporal dev server (pid %d) died; restarting it", pid), time.Minute)
	waitFor(t, dev, "The Temporal dev server is back", 2*time.Minute)
	for i := range devBurst {
		path := fmt.Sprintf("%sburst-%02d/last_operation?operation=provision", url, i)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			status, body, _ := testenv.HTTP(http.MethodGet, path, "", &osb, testenv.OSBHeader)
			assert.Equal(c, http.StatusOK, status, body)
			assert.Contains(c, body, `"state":"succeeded"`)
		}, 3*time.Minute, 200*time.Millisecond, "burst-%02d succeeds once Temporal is back", i)
	}

	// Ten restarts of the dev server leave no zombie behind: the
	// supervisor reaps each dead one.
	for restart := 2; restart <= 10; restart++ {
		pid, ok := childproc.Running(filepath.Join(data, "temporal", "pids", "temporal.pid"))
		require.True(t, ok, "the dev server runs before restart %d", restart)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		waitFor(t, dev, fmt.Sprintf("The Temporal dev server (pid %d) died; restarting it", pid), time.Minute)
		require.Eventually(t, func() bool { return strings.Count(dev.log.String(), "The Temporal dev server is back") == restart },
			2*time.Minute, 100*time.Millisecond, "the dev server is back after restart %d", restart)
	}
	assert.Empty(t, zombies(t, dev.cmd.Process.Pid), "after ten restarts of its dev server, qm dev has no zombie child")

	// SIGKILL of qm dev: its servers die with it, and a new one starts at once.
	var children []int
	for _, f := range []string{"cluster/pids/etcd.pid", "cluster/pids/kube-apiserver.pid", "temporal/pids/temporal.pid"} {
		pid, ok := childproc.Running(filepath.Join(data, f))
		require.True(t, ok, "%s runs", f)
		children = append(children, pid)
	}
	dev.kill(t)
	again := start(t, qm, "qm-dev-again", nil, args...)
	t.Cleanup(func() {
		// Before the new qm dev is stopped (cleanups run last first):
		// what holds etcd's data then is what its etcd waited for.
		if t.Failed() {
			t.Logf("--- the end of the control plane's log, and who holds etcd's data:\n%s\n%s",
				tail(readFile(filepath.Join(data, "logs", "controlplane.log")), 30), holders(filepath.Join(data, "etcd")))
		}
	})
	waitFor(t, again, "Quartermaster is running.", 3*time.Minute)
	for _, pid := range children {
		assert.False(t, childproc.Alive(pid), "pid %d of the killed qm dev is gone", pid)
	}
	status, body, _ := testenv.HTTP(http.MethodGet, url+"burst-00", "", &osb, testenv.OSBHeader)
	assert.Equal(t, http.StatusOK, status, "the new qm dev serves what the old one made: %s", body)
}

// zombies lists the children of parent that have exited and that no one
// has waited for (state Z in /proc).
func zombies(t *testing.T, parent int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var found []string
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
		stat := string(raw)
		fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
		if len(fields) >= 2 && fields[0] == "Z" && fields[1] == strconv.Itoa(parent) {
			found = append(found, stat[:strings.LastIndexByte(stat, ')')+1])
		}
	}
	return found
}

// readFile is a file's text, or what kept it from being read.
func readFile(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(raw)
}

// holders names the processes with a file under dir open (a killed
// qm dev's etcd that outlived it would hold its database's lock, and the
// next etcd would wait for it).
func holders(dir string) string {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	found := map[string]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, dir+"/") {
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			found["pid "+pid+" ("+strings.TrimSpace(string(comm))+")"] = true
		}
	}
	if len(found) == 0 {
		return "no process holds a file under " + dir
	}
	return "holding files under " + dir + ": " + strings.Join(slices.Sorted(maps.Keys(found)), ", ")
}

// waitFor waits until a process has written want.
func waitFor(t *testing.T, p *process, want string, timeout time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.log.String(), want) }, timeout, 100*time.Millisecond,
		"%s says %q", p.name, want)
}

// freePorts are testenv.FreePorts as the flags take them.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for _, p := range testenv.FreePorts(t, n) {
		out = append(out, strconv.Itoa(p))
	}
	return out
}
