package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/internal/temporalcluster"
)

// TemporalServer is a Temporal the tests run on: the CLI's dev server, or
// a cluster as production runs it (internal/temporalcluster).
type TemporalServer interface {
	FrontendHostPort() string
	Client() client.Client
	Stop() error
}

// TemporalKind says which Temporal the shared one is: QM_TEMPORAL=cluster
// runs every test of the binary on a cluster (make test-cluster); by
// default it is the dev server.
func TemporalKind() string {
	if os.Getenv("QM_TEMPORAL") == "cluster" {
		return "cluster"
	}
	return "dev server"
}

// devTemporal is the dev server as a TemporalServer: stopping it closes its
// client too.
type devTemporal struct{ *devserver.Server }

func (d devTemporal) Stop() error {
	d.Client().Close()
	return d.Server.Stop()
}

// Temporal returns a client of the shared Temporal (TemporalKind): the dev
// server, in memory and headless, with Quartermaster's search attributes;
// or a cluster, whose search attributes the first worker registers.
func Temporal(t testing.TB) client.Client {
	t.Helper()
	temporalOnce.Do(func() {
		if TemporalKind() == "cluster" {
			var c *temporalcluster.Cluster
			if c, temporalErr = startCluster(); temporalErr == nil {
				temporalSrv = c
				fmt.Fprintf(os.Stderr, "testenv: the tests run on a Temporal cluster at %s (PostgreSQL; %v each a process; files in %s)\n",
					c.FrontendHostPort(), temporalcluster.Services, c.Dir)
			}
			return
		}
		path := requireTool(t, "temporal")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var srv *devserver.Server
		sharedOut = &SyncBuffer{Max: sharedOutput, Tail: true}
		if srv, temporalErr = startDevServer(ctx, devserver.Options{Path: path, Namespaces: pooledNamespaces(), Env: ServerEnv, Out: sharedOut}); temporalErr == nil {
			temporalSrv = devTemporal{srv}
			sharedDev.Store(srv)
		}
	})
	if temporalErr != nil {
		t.Fatalf("starting Temporal (%s): %v", TemporalKind(), temporalErr)
	}
	return temporalSrv.Client()
}

// sharedOutput is how much of the shared dev server's latest output is
// kept, for a test that can no longer reach it.
const sharedOutput = 16 << 10

// sharedOut is the shared dev server's latest output, and sharedDev the
// server once it runs: read by any test, whichever started it.
var (
	sharedOut *SyncBuffer
	sharedDev atomic.Pointer[devserver.Server]
)

// SharedTemporalState says whether the shared dev server still runs, with
// the end of its output: what a test that could not reach it reports ("",
// if no test started it).
func SharedTemporalState() string {
	dev := sharedDev.Load()
	if dev == nil {
		return ""
	}
	return fmt.Sprintf("the shared Temporal dev server is %s; the end of its output:\n%s", dev.State(), sharedOut.String())
}

// namespacePool holds the shared dev server's namespaces besides "default"
// that no System holds now (OwnTemporalNamespace).
var namespacePool = make(chan string, poolSize)

// poolSize is how many Systems of a test binary may hold a Temporal
// namespace of their own at once: more than go test's -parallel, so that a
// test with two Systems does not wait for one.
const poolSize = 24

// pooledNamespaces names the pool's namespaces and fills it.
func pooledNamespaces() []string {
	names := make([]string, poolSize)
	for i := range names {
		names[i] = fmt.Sprintf("qm-test-%d", i)
		namespacePool <- names[i]
	}
	return names
}

// OwnTemporalNamespace returns a client of a namespace of the shared dev
// server that the test alone uses until it ends: task queues, workflow IDs
// and visibility of its own, so that its worker never takes another test's
// tasks. When the test ends, the namespace's open runs are terminated and
// it goes back to the pool for a later test. On a Temporal cluster
// (TemporalKind) it is the shared client, "default".
func OwnTemporalNamespace(t testing.TB) (client.Client, string) {
	t.Helper()
	shared := Temporal(t)
	if TemporalKind() == "cluster" {
		return shared, "default"
	}
	var ns string
	select {
	case ns = <-namespacePool:
	case <-time.After(5 * time.Minute):
		t.Fatalf("no Temporal namespace came free in 5 minutes: more Systems at once than the pool's %d", poolSize)
	}
	// The shared client's logger: a client without one logs the SDK's
	// debug lines, every timer of every run.
	tc, err := client.NewClientFromExisting(shared, client.Options{Namespace: ns, Logger: log.NewStructuredLogger(slog.Default())})
	if err != nil {
		namespacePool <- ns
		t.Fatalf("a client of the Temporal namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		defer func() { namespacePool <- ns }()
		defer tc.Close()
		if err := terminateOpenRuns(tc); err != nil {
			t.Errorf("clearing the Temporal namespace %s for the next test: %v", ns, err)
		}
	})
	return tc, ns
}

// terminateOpenRuns ends every run still open in tc's namespace: the
// long-lived loops a test leaves behind would otherwise run on in the next
// test's worker.
func terminateOpenRuns(tc client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "ExecutionStatus = 'Running'"})
		if err != nil {
			return fmt.Errorf("listing the open runs: %w", err)
		}
		if len(resp.Executions) == 0 {
			return nil
		}
		for _, e := range resp.Executions {
			err := tc.TerminateWorkflow(ctx, e.Execution.WorkflowId, e.Execution.RunId, "the test ended")
			if err != nil && !isNotFound(err) {
				return fmt.Errorf("terminating %s: %w", e.Execution.WorkflowId, err)
			}
		}
		// Visibility lists a terminated run as running a moment longer.
		select {
		case <-ctx.Done():
			return fmt.Errorf("runs still open after a minute: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isNotFound says whether err is Temporal's answer for a run that is gone
// or closed already.
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// TemporalAddress is the host:port of the shared Temporal.
func TemporalAddress(t testing.TB) string {
	t.Helper()
	Temporal(t)
	return temporalSrv.FrontendHostPort()
}

// TemporalCluster starts a cluster of the test's own; it stops when the
// test ends.
func TemporalCluster(t testing.TB) *temporalcluster.Cluster {
	t.Helper()
	for _, tool := range []string{"temporal-server", "temporal-sql-tool", "postgres/bin/postgres"} {
		requireTool(t, tool)
	}
	c, err := startCluster()
	if err != nil {
		t.Fatalf("starting a Temporal cluster: %v", err)
	}
	t.Cleanup(func() {
		// A service killed after its grace period still stopped: no test
		// here is about the cluster's own shutdown (matching drains its
		// long polls, which a lost namespace's hold for a minute).
		switch err := c.Stop(); {
		case err == nil:
		case temporalcluster.OnlyKilled(err):
			t.Logf("stopping the Temporal cluster: %v", err)
		default:
			t.Errorf("stopping the Temporal cluster: %v", err)
		}
	})
	return c
}

// startCluster starts a cluster. It registers no search attributes: as on
// a production cluster, Quartermaster's workers do at start (the
// System's in-process worker too, on a System's own cluster).
func startCluster() (*temporalcluster.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return temporalcluster.Start(ctx, temporalcluster.Options{BinDir: BinDir()})
}

// LosableTemporal is a dev server of the test's own, with its history in
// a file, whose whole state the test can lose: the disaster of a Temporal
// restored empty or a namespace recreated.
type LosableTemporal struct {
	t    testing.TB
	opts devserver.Options
	srv  *devserver.Server
	// client is the first server's: it reconnects to each server that
	// takes that one's place, as the clients of running components do.
	client client.Client
}

// NewLosableTemporal starts a dev server of the test's own; it stops when
// the test ends.
func NewLosableTemporal(t testing.TB) *LosableTemporal {
	t.Helper()
	dir := t.TempDir()
	l := &LosableTemporal{t: t, opts: devserver.Options{Path: requireTool(t, "temporal"), Address: FreeAddr(t),
		DBFile: filepath.Join(dir, "temporal.db"), RunDir: filepath.Join(dir, "run"), Env: ServerEnv}}
	l.start()
	l.client = l.srv.Client()
	t.Cleanup(func() {
		l.client.Close()
		_ = l.srv.Stop()
	})
	return l
}

// Client is a client of the server, whichever one runs.
func (l *LosableTemporal) Client() client.Client { return l.client }

// Address is the server's host:port, the same after Lose.
func (l *LosableTemporal) Address() string { return l.opts.Address }

// Lose kills the server, deletes its database and starts a new, empty one
// at the same address, with Quartermaster's search attributes as `qm dev`
// registers them.
func (l *LosableTemporal) Lose() {
	l.t.Helper()
	require.NoError(l.t, l.srv.Stop(), "stopping the dev server")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(l.opts.DBFile + suffix); err != nil && !os.IsNotExist(err) {
			l.t.Fatalf("deleting Temporal's database: %v", err)
		}
	}
	l.start()
}

func (l *LosableTemporal) start() {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startDevServer(ctx, l.opts)
	require.NoError(l.t, err, "starting a dev server of the test's own")
	if l.srv != nil {
		// Only the first server's client is used.
		srv.Client().Close()
	}
	l.srv = srv
}
