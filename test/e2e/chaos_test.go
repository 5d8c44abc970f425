package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/chaos"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/internal/temporalcluster"
	"github.com/quartermaster/qm/internal/testenv"
)

// chaosKnobs are the run's size: `make chaos` sets them (SEED, N, DURATION,
// FAULTS, RECOVERY); `make test` runs the short default.
type chaosKnobs struct {
	seed     uint64
	n        int
	duration time.Duration
	faults   int
	// recovery bounds the p99 of the recovery from a fault. The short run
	// allows three times the long run's 15 s: on two cores under -race a
	// recovery takes longer, and a minute-long stall still fails it.
	recovery time.Duration
	// kinds are the faults: the qm processes', kube-apiserver's and the
	// dev server's, or on a Temporal cluster (QM_TEMPORAL=cluster) its
	// services' and its database's.
	kinds []chaos.Kind
}

func knobs(t *testing.T) chaosKnobs {
	kinds := chaos.Kinds
	if testenv.TemporalKind() == "cluster" {
		kinds = chaos.ClusterKinds
	}
	k := chaosKnobs{seed: 1, n: 16, duration: time.Minute, faults: len(kinds), recovery: 45 * time.Second, kinds: kinds}
	for name, parse := range map[string]func(string) error{
		"QM_CHAOS_SEED":     func(v string) (err error) { k.seed, err = strconv.ParseUint(v, 10, 64); return err },
		"QM_CHAOS_N":        func(v string) (err error) { k.n, err = strconv.Atoi(v); return err },
		"QM_CHAOS_DURATION": func(v string) (err error) { k.duration, err = time.ParseDuration(v); return err },
		"QM_CHAOS_FAULTS":   func(v string) (err error) { k.faults, err = strconv.Atoi(v); return err },
		"QM_CHAOS_RECOVERY": func(v string) (err error) { k.recovery, err = time.ParseDuration(v); return err },
	} {
		if v := os.Getenv(name); v != "" {
			require.NoError(t, parse(v), name)
		}
	}
	return k
}

// cluster is the chaos run's system: its own control plane and Temporal
// (so that they can be hurt without hurting other tests), and qm as four
// processes. Temporal is a dev server on SQLite, or with QM_TEMPORAL=cluster
// a cluster of its own (tc).
type cluster struct {
	t          *testing.T
	qm         string
	data       string
	cp         *controlplane.ControlPlane
	cpLog      *testenv.SyncBuffer
	temporal   devserver.Options
	temporalMu sync.Mutex
	srv        *devserver.Server // the dev server now running
	tc         *temporalcluster.Cluster
	// temporalAddr is the frontend's host:port, the dev server's or the cluster's.
	temporalAddr string
	roles        map[string]*role
	apiURL       string
}

// role is one qm process, restarted under the same name and log.
type role struct {
	name string
	args []string
	env  []string
	log  *testenv.SyncBuffer

	mu   sync.Mutex
	p    *process
	peak int64
}

func (r *role) current() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

func (c *cluster) start(r *role) error {
	p, err := launch(c.qm, r.name, r.env, r.log, r.args...)
	if err != nil {
		return err
	}
	c.t.Cleanup(func() { p.stop(c.t) })
	r.mu.Lock()
	r.p = p
	r.mu.Unlock()
	return nil
}

// sampleRSS records the resident memory of every qm process.
func (c *cluster) sampleRSS() {
	for _, r := range c.roles {
		p := r.current()
		if p == nil || p.cmd.Process == nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		var kb int64
		for _, line := range splitLines(string(raw)) {
			if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
				break
			}
		}
		r.mu.Lock()
		r.peak = max(r.peak, kb<<10)
		r.mu.Unlock()
	}
}

// startCluster starts the control plane, the dev server on SQLite, two
// workers, the watcher and the API.
func startCluster(t *testing.T, qm string) *cluster {
	c := &cluster{t: t, qm: qm, data: t.TempDir(), cpLog: &testenv.SyncBuffer{}, roles: map[string]*role{}}
	cp, err := controlplane.Start(controlplane.Options{BinDir: testenv.BinDir(), DataDir: filepath.Join(c.data, "kube"), Out: c.cpLog})
	require.NoError(t, err, "starting the control plane")
	c.cp = cp
	t.Cleanup(func() { _ = cp.Stop() })
	ports := freePorts(t, 2)
	if testenv.TemporalKind() == "cluster" {
		c.tc = testenv.TemporalCluster(t)
		c.temporalAddr = c.tc.FrontendHostPort()
	} else {
		c.temporal = devserver.Options{Path: filepath.Join(testenv.BinDir(), "temporal"), RunDir: filepath.Join(c.data, "temporal"),
			DBFile: filepath.Join(c.data, "temporal.db"), Address: "127.0.0.1:" + ports[0], Out: &testenv.SyncBuffer{}}
		srv, err := devserver.Start(context.Background(), c.temporal)
		require.NoError(t, err, "starting the dev server")
		srv.Client().Close()
		c.srv = srv
		c.temporalAddr = c.temporal.Address
		t.Cleanup(func() { c.killTemporal() })
	}

	kubeconfig := filepath.Join(c.data, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, cp.Kubeconfig, 0o600))
	common := []string{"--kubeconfig", kubeconfig, "--temporal-address", c.temporalAddr, "--log-level", "info"}
	t.Setenv("QM_CATALOG_NAMESPACES", chaosNamespace) // see newProcessEnv
	add := func(name string, env []string, args ...string) {
		c.roles[name] = &role{name: name, args: append(args, common...), env: env, log: &testenv.SyncBuffer{}}
		require.NoError(t, c.start(c.roles[name]))
	}
	add("worker-0", nil, "worker", "--health-addr", "0", "--metrics-addr", "0")
	add("worker-1", nil, "worker", "--health-addr", "0", "--metrics-addr", "0")
	add("watcher", nil, "watcher", "--leader-elect=false", "--health-addr", "0", "--metrics-addr", "0")
	c.apiURL = "http://127.0.0.1:" + ports[1]
	add("api", []string{"QM_OSB_USERNAME=" + testenv.OSBCredentials.Username, "QM_OSB_PASSWORD=" + testenv.OSBCredentials.Password},
		"api", "--listen", "127.0.0.1:"+ports[1], "--namespace", chaosNamespace)
	return c
}

// chaosNamespace holds the run's catalog and instances.
const chaosNamespace = "chaos"

// killTemporal kills the dev server, wherever it is in its restarts, and
// reaps it.
func (c *cluster) killTemporal() {
	if pid, ok := childproc.Running(filepath.Join(c.temporal.RunDir, "pids", "temporal.pid")); ok {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if c.srv != nil {
		_ = c.srv.Stop()
	}
}

// inject applies one fault, waits its downtime, and undoes it.
func (c *cluster) inject(ctx context.Context, f chaos.Fault) error {
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	kill := func(name string) error {
		r := c.roles[name]
		_ = r.current().cmd.Process.Kill()
		<-r.current().done
		sleep(f.For)
		return c.start(r)
	}
	switch f.Kind {
	case chaos.KillWorker:
		return kill(fmt.Sprintf("worker-%d", f.Which))
	case chaos.KillWatcher:
		return kill("watcher")
	case chaos.KillAPI:
		return kill("api")
	case chaos.PauseWorker:
		p := c.roles[fmt.Sprintf("worker-%d", f.Which)].current()
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		sleep(f.For)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	case chaos.KillTemporal:
		c.temporalMu.Lock()
		defer c.temporalMu.Unlock()
		c.killTemporal()
		sleep(f.For)
		srv, err := devserver.Start(context.Background(), c.temporal)
		if err != nil {
			return fmt.Errorf("restarting the dev server: %w", err)
		}
		srv.Client().Close()
		c.srv = srv
	case chaos.StopKube:
		return c.cp.RestartAPIServer(f.For)
	case chaos.KillHistory:
		return c.tc.Kill(ctx, "history", f.For)
	case chaos.KillMatching:
		return c.tc.Kill(ctx, "matching", f.For)
	case chaos.KillFrontend:
		return c.tc.Kill(ctx, "frontend", f.For)
	case chaos.RestartPostgres:
		return c.tc.RestartPostgres(ctx, f.For)
	}
	return nil
}

// osbClient is a platform: it retries connection errors and 5xx, as
// platforms do, and records every code it got.
type osbClient struct {
	url   string
	mu    sync.Mutex
	codes map[string][]int // by request kind
}

func (o *osbClient) do(kind, method, path, body string, deadline time.Time) (int, string) {
	for {
		status, got, _ := testenv.HTTP(method, o.url+path, body, &testenv.OSBCredentials, testenv.OSBHeader)
		if status != 0 {
			o.mu.Lock()
			o.codes[kind] = append(o.codes[kind], status)
			o.mu.Unlock()
		}
		if status != 0 && status < 500 || time.Now().After(deadline) {
			return status, got
		}
		time.Sleep(200 * time.Millisecond) // a platform's retry pace
	}
}

// allowedCodes are the codes OSB 2.17 allows for each request (5xx are
// allowed everywhere and retried).
var allowedCodes = map[string][]int{
	"provision":      {200, 201, 202, 400, 409, 422},
	"update":         {200, 202, 400, 422},
	"deprovision":    {200, 202, 400, 410, 422},
	"bind":           {200, 201, 202, 400, 409, 422},
	"unbind":         {200, 202, 400, 410, 422},
	"last_operation": {200, 400, 404, 410},
}

func badCodes(codes map[string][]int) int {
	n := 0
	for kind, cs := range codes {
		for _, c := range cs {
			if c >= 500 {
				continue
			}
			ok := false
			for _, a := range allowedCodes[kind] {
				ok = ok || a == c
			}
			if !ok {
				n++
			}
		}
	}
	return n
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		if r == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
