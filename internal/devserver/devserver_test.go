package devserver_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// children lists this process's children: pid and state (R, S, Z...).
func children(t *testing.T) map[string]string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	found := map[string]string{}
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		stat := string(raw)
		fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
		if len(fields) >= 2 && fields[1] == strconv.Itoa(os.Getpid()) {
			found[filepath.Base(filepath.Dir(path))] = fields[0]
		}
	}
	return found
}

func options(t *testing.T) devserver.Options {
	return devserver.Options{Path: filepath.Join(testenv.BinDir(), "temporal"), RunDir: t.TempDir()}
}

func TestStopReapsAServerThatDied(t *testing.T) {
	opts := options(t)
	srv, err := devserver.Start(context.Background(), opts)
	require.NoError(t, err)
	srv.Client().Close()
	pid, ok := childproc.Running(filepath.Join(opts.RunDir, "pids", "temporal.pid"))
	require.True(t, ok)
	assert.Equal(t, "running (pid "+strconv.Itoa(pid)+")", srv.State())
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return strings.HasPrefix(srv.State(), "exited") }, 10*time.Second, 10*time.Millisecond, "the killed server exits")
	assert.Equal(t, "exited (pid "+strconv.Itoa(pid)+", not yet reaped, killed by SIGKILL)", srv.State(), "a test that can no longer reach it is told how")
	require.NoError(t, srv.Stop(), "a server that died is stopped")
	assert.Equal(t, "gone (pid "+strconv.Itoa(pid)+")", srv.State())
	assert.NotContains(t, children(t), strconv.Itoa(pid), "the dead server is reaped, not left a zombie")
}

func TestAStartThatFailsLeavesNoProcess(t *testing.T) {
	opts := options(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the server never gets to accept a client
	_, err := devserver.Start(ctx, opts)
	require.Error(t, err)
	pid, _ := childproc.Running(filepath.Join(opts.RunDir, "pids", "temporal.pid"))
	require.NotZero(t, pid, "the server was started")
	assert.NotContains(t, children(t), strconv.Itoa(pid), "the server of a failed start is stopped and reaped")
}

// TestAStartOnATakenPortFailsAtOnce: a server that exits as it starts
// (its port is taken) fails its start within seconds, saying so, rather
// than after the SDK's minute of dialling it, and leaves no process behind.
func TestAStartOnATakenPortFailsAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	opts := options(t)
	opts.Address = taken.Addr().String()
	began := time.Now()
	_, err = devserver.Start(context.Background(), opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited as it started")
	assert.Contains(t, err.Error(), "address already in use", "the error quotes the server's own output, which says why")
	assert.Less(t, time.Since(began), 20*time.Second, "the start fails once the process is gone, not after the SDK's minute")
	pid, _ := childproc.Running(filepath.Join(opts.RunDir, "pids", "temporal.pid"))
	require.NotZero(t, pid, "the server was started")
	assert.NotContains(t, children(t), strconv.Itoa(pid), "the server that exited is reaped")
}

// TestStopRemovesTheRunDirectoryItMade: a server started without a run
// directory gets a temporary one, gone once the server stops (the tests
// start hundreds a run), as it is after a start that fails.
func TestStopRemovesTheRunDirectoryItMade(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	opts := options(t)
	opts.RunDir = ""
	srv, err := devserver.Start(context.Background(), opts)
	require.NoError(t, err)
	made, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Len(t, made, 1, "the run directory")
	srv.Client().Close()
	require.NoError(t, srv.Stop())
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the run directory is removed with the server")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = devserver.Start(ctx, opts)
	require.Error(t, err)
	left, err = os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "a failed start removes it too")
}
