package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// The rolling update's size: rollingProvisions provisions at rollingRate a
// second while every process is replaced, and as many before, at the same
// pace, without restarts, for the baseline. The baseline is the same
// workload so that its slowest provision carries the same load: on a busy
// machine 200 provisions of many objects queue where 40 did not, and a
// shorter baseline counted that queue as the restarts' stall.
const (
	rollingProvisions  = 200
	baselineProvisions = rollingProvisions
	rollingRate        = 5
	// rollingEvery paces the six replacements over the provisions.
	rollingEvery = rollingProvisions / rollingRate * time.Second / 7
	// rollingSlack is how much longer than without restarts an operation
	// may take: one workflow task timeout, and 5 s. The dev server (Temporal
	// 1.29) cannot complete a stopping worker's polls, so the SDK cancels
	// them itself, and a task the server hands to one at that instant waits
	// out its timeout (temporalio/sdk-go#2199; the Temporal cluster, 1.31,
	// completes them: internal/temporalcluster). A stall beyond that is the
	// restarts' own.
	rollingSlack = runs.WorkflowTaskTimeout + 5*time.Second
	// rollingObjects is how many ConfigMaps a provision applies: enough
	// that an apply lasts a while, so that a worker told to stop holds
	// applies in hand. Not more: the upgrade's steps run a mass update of
	// every instance beside the provisions, and with 20 the API server's
	// work (a read and a write an object) queued the provisions 10 to 15 s
	// on the Temporal cluster.
	rollingObjects = 10
)

// rollingTemplates render rollingObjects ConfigMaps, then succeed.
var rollingTemplates = fmt.Sprintf(`  - action: provision
    type: gotemplate
    content: |
      {{- range $i := until %d }}
      ---
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ $.instance.metadata.name }}-{{ $i }}}
      data: {}
      {{- end }}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
`, rollingObjects)

// fleet is the processes of a rolling update: two of each kind, each
// replaced by a new one under the next name.
type fleet struct {
	t      *testing.T
	qm     string
	common []string
	// extra are more arguments of the processes of a kind, after common.
	extra map[string][]string
	env   []string
	ns    string
	mu    sync.Mutex
	procs map[string][]*process // by kind
	all   []*process            // every process started, for their logs
	apis  []string              // the addresses of the APIs now serving
	next  int
}

func (f *fleet) start(kind string) *process {
	f.t.Helper()
	f.next++
	name := fmt.Sprintf("%s-%d", kind, f.next)
	args := []string{kind, "--health-addr", "0", "--metrics-addr", "0"}
	switch kind {
	case "watcher":
		args = append(args, "--leader-election-namespace", f.ns, "--leader-elect-lease-duration", "6s",
			"--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", "1s")
	case "api":
		args = []string{"api", "--listen", "127.0.0.1:0", "--namespace", f.ns}
	}
	var health string
	if kind == "watcher" {
		// A standby logs nothing until it leads: its health endpoint
		// says that it runs.
		health = "127.0.0.1:" + freePorts(f.t, 1)[0]
		args[2] = health
	}
	p := start(f.t, f.qm, name, f.env, slices.Concat(args, f.common, f.extra[kind])...)
	switch kind {
	case "worker":
		waitFor(f.t, p, "Started Worker", time.Minute)
	case "watcher":
		require.Eventually(f.t, func() bool {
			status, _, _ := testenv.HTTP(http.MethodGet, "http://"+health+"/healthz", "", nil, nil)
			return status == http.StatusOK
		}, time.Minute, 50*time.Millisecond, "%s is healthy", name)
	case "api":
		waitFor(f.t, p, "serving the API", time.Minute)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[kind] = append(f.procs[kind], p)
	f.all = append(f.all, p)
	if kind == "api" {
		f.apis = append(f.apis, p.address(f.t))
	}
	return p
}

// replace sends SIGTERM to the oldest process of kind, waits until it has
// left, and starts its successor.
func (f *fleet) replace(kind string) {
	f.t.Helper()
	f.mu.Lock()
	old := f.procs[kind][0]
	f.procs[kind] = f.procs[kind][1:]
	if kind == "api" {
		f.apis = f.apis[1:]
	}
	f.mu.Unlock()
	require.NoError(f.t, old.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-old.done:
	case <-time.After(time.Minute):
		require.Fail(f.t, "the process did not leave within a minute of SIGTERM", old.name)
	}
	f.start(kind)
}

// putRetrying PUTs body to path through an API (the try-th in turn), and
// again on the other one while the answer is a refused connection or a
// 5xx, as a platform does, for a minute at most; it returns nil once the
// answer is one of ok.
func putRetrying(f *fleet, path, body string, try int, ok ...int) error {
	deadline := time.Now().Add(time.Minute)
	for ; ; try++ {
		status, got, _ := testenv.HTTP(http.MethodPut, f.api(try)+path, body, &testenv.OSBCredentials, testenv.OSBHeader)
		if slices.Contains(ok, status) {
			return nil
		}
		if status != 0 && status < 500 || time.Now().After(deadline) {
			return fmt.Errorf("PUT %s: %d %s", path, status, got)
		}
		time.Sleep(100 * time.Millisecond) // a platform's retry pace
	}
}

// paced calls call(i) for each i below n, the i-th i/rollingRate seconds
// from now (each scheduled on a goroutine of its own), and returns their
// errors joined. It needs no test handle: the calls run beside the test
// goroutine.
func paced(n int, call func(i int) error) error {
	errs := make(chan error, n)
	for i := range n {
		time.AfterFunc(time.Duration(i)*time.Second/rollingRate, func() { errs <- call(i) })
	}
	var all []error
	for range n {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// api is the address of an API now serving, in turn.
func (f *fleet) api(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apis[i%len(f.apis)]
}

// TestRollingUpdateUnderLoad replaces every process of Quartermaster, one at
// a time and kind after kind (workers, watchers, APIs, each by SIGTERM as a
// Deployment's rolling update does), while provisions arrive through OSB.
// Nothing is lost, stuck or duplicated, and no provision takes more than
// rollingSlack longer than the slowest of a baseline run without restarts.
func TestRollingUpdateUnderLoad(t *testing.T) {
	e := newProcessEnv(t)
	r := newRollout(t, e, e.qm, nil)
	baseline := r.baseline("base", baselineProvisions)
	r.checkStall("roll", baseline, r.roll("roll", e.qm, nil), false)
	r.checkOnce("roll")
}
