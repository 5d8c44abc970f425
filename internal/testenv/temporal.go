package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

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
		if srv, temporalErr = devserver.Start(ctx, devserver.Options{Path: path}); temporalErr == nil {
			temporalSrv = devTemporal{srv}
		}
	})
	if temporalErr != nil {
		t.Fatalf("starting Temporal (%s): %v", TemporalKind(), temporalErr)
	}
	return temporalSrv.Client()
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
		if err := c.Stop(); err != nil {
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
		DBFile: filepath.Join(dir, "temporal.db"), RunDir: filepath.Join(dir, "run")}}
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
	srv, err := devserver.Start(ctx, l.opts)
	require.NoError(l.t, err, "starting a dev server of the test's own")
	if l.srv != nil {
		// Only the first server's client is used.
		srv.Client().Close()
	}
	l.srv = srv
}
