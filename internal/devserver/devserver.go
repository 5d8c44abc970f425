// Package devserver runs the Temporal CLI's development server (bin/temporal,
// built by `make tools`) with Quartermaster's search attributes registered.
// `qm dev` runs it with SQLite persistence and the Web UI; the integration
// tests run it in memory, headless, on a free port.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"golang.org/x/sys/unix"

	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/freeport"
	"github.com/quartermaster/qm/workflows/runs"
)

// Options configure a dev server.
type Options struct {
	// Path is the temporal CLI binary.
	Path string
	// RunDir holds the link the server is started through, so that it dies
	// with this process (internal/childproc), and its pid file; empty: a
	// temporary directory.
	RunDir string
	// DBFile keeps history in SQLite across restarts; empty keeps it in memory.
	DBFile string
	// Address is the frontend's host:port; empty picks a free loopback port
	// below the ephemeral range (internal/freeport).
	Address string
	// UIPort serves the Web UI; 0 runs headless.
	UIPort int
	// Namespace is registered at start; empty means "default".
	Namespace string
	// Namespaces are registered at start too, each with Quartermaster's
	// search attributes: ready at once, where one registered later waits
	// out the server's namespace cache.
	Namespaces []string
	// Out receives the server's output; nil discards it.
	Out io.Writer
	// Logger is used by the returned client; nil uses slog's default.
	Logger *slog.Logger
	// DynamicConfig sets dynamic config values of the server, such as
	// limit.historyCount.suggestContinueAsNew.
	DynamicConfig map[string]string
	// Env is added to the server's environment: the tests tune the Go
	// runtime's garbage collector there (GOGC).
	Env []string
}

// Server is a running dev server. Its Stop always waits for the process,
// so that a server that died by itself leaves no zombie behind: the SDK's
// Stop returns without waiting when its interrupt fails.
type Server struct {
	*testsuite.DevServer
	pid int
	// tempDir is the run directory Start made, removed by Stop.
	tempDir string
}

// Start starts the dev server and returns once it accepts clients. If it
// does not come up, the process it started is stopped and reaped.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	tail := &childproc.Tail{}
	opts.Out = io.MultiWriter(opts.Out, tail)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Address == "" {
		port, err := freeport.Loopback(1)
		if err != nil {
			return nil, fmt.Errorf("starting the Temporal dev server: %w", err)
		}
		opts.Address = "127.0.0.1:" + strconv.Itoa(port[0])
	}
	var attrs []temporal.SearchAttributeUpdate
	for _, key := range runs.SearchAttributeKeys() {
		attrs = append(attrs, key.ValueSet(""))
	}
	// The CLI turns the search-attribute cache off so that attributes added
	// at run time show at once; Quartermaster registers its attributes
	// before the first start, and with the cache off every workflow start
	// reads them from SQLite again (a fifth of the server's CPU per start).
	// Eager activities: a mass update's batch goes to the worker whose
	// workflow task scheduled it, in that task's answer, without a trip
	// through the task queue (about 40 ms a batch on SQLite).
	// Priority and fairness (internal/fairness): the matcher that honours
	// priorities, and each fairness key its share. One partition per task
	// queue, not four: the order is kept per partition, and one process on
	// one machine gains nothing from matching in four.
	extra := []string{"--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false",
		"--dynamic-config-value", "system.enableActivityEagerExecution=true",
		"--dynamic-config-value", "matching.useNewMatcher=true",
		"--dynamic-config-value", "matching.enableFairness=true",
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1"}
	for _, ns := range opts.Namespaces {
		extra = append(extra, "--namespace", ns)
	}
	for _, key := range slices.Sorted(maps.Keys(opts.DynamicConfig)) {
		extra = append(extra, "--dynamic-config-value", key+"="+opts.DynamicConfig[key])
	}
	if opts.DBFile != "" {
		// Write-ahead logging without an fsync per commit: a crash of the
		// machine may lose the last moments of history, a crash of the
		// process loses nothing. Per-commit fsyncs would cap the dev server
		// at a few dozen workflows a second on this kind of disk.
		extra = append(extra, "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal")
	}
	runDir, tempDir := opts.RunDir, ""
	if runDir == "" {
		var err error
		if runDir, err = os.MkdirTemp("", "qm-temporal-"); err != nil {
			return nil, err
		}
		tempDir = runDir
	}
	if _, err := Cleanup(runDir, opts.Path); err != nil {
		return nil, err
	}
	linkDir, err := childproc.Links(filepath.Join(runDir, "bin"), filepath.Dir(opts.Path), filepath.Join(runDir, "pids"), opts.Env, filepath.Base(opts.Path))
	if err != nil {
		return nil, err
	}
	pidFile := filepath.Join(runDir, "pids", filepath.Base(opts.Path)+".pid")
	// The start is cancelled if the process exits first. startCtx is not
	// cancelled once the server is up: the SDK's client, dialled with it,
	// lives as long as it (its parent, ctx, ends both).
	startCtx, cancel := context.WithCancelCause(ctx)
	started := make(chan struct{})
	go failOnExit(startCtx, started, pidFile, cancel)
	srv, err := testsuite.StartDevServer(startCtx, testsuite.DevServerOptions{
		ExistingPath: filepath.Join(linkDir, filepath.Base(opts.Path)),
		ClientOptions: &client.Options{
			HostPort:  opts.Address,
			Namespace: opts.Namespace,
			Logger:    log.NewStructuredLogger(opts.Logger),
			// On loopback gzip is CPU spent for nothing (qm's clients
			// of Temporal are uncompressed unless told otherwise).
			ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
		},
		DBFilename:       opts.DBFile,
		EnableUI:         opts.UIPort != 0,
		UIPort:           uiPort(opts.UIPort),
		LogLevel:         "warn",
		LogFormat:        "json",
		SearchAttributes: temporal.NewSearchAttributes(attrs...),
		ExtraArgs:        extra,
		Stdout:           opts.Out,
		Stderr:           opts.Out,
	})
	close(started)
	if err != nil {
		if cause := context.Cause(startCtx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		// The process may not have written its pid yet: give it a moment.
		// One that exited already is reaped all the same.
		for wait := 0; wait < 50; wait++ {
			if pid, _ := childproc.Running(pidFile); pid != 0 {
				reap(pid)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		removeTemp(tempDir)
		return nil, fmt.Errorf("starting the Temporal dev server %s: %w%s", opts.Path, err, tail.Quote("the server"))
	}
	pid, _ := childproc.Running(pidFile)
	return &Server{DevServer: srv, pid: pid, tempDir: tempDir}, nil
}

// failOnExit cancels a start once the server's process is gone: a server
// that exits as it starts (its port taken, its database locked) then fails
// its start at once, instead of after the minute the SDK spends dialling
// it, so that qm dev's restarts with backoff back off from real failures.
func failOnExit(ctx context.Context, started <-chan struct{}, pidFile string, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-started:
			return
		case <-tick.C:
		}
		// No pid yet: the process has not written its pid file.
		if pid, running := childproc.Running(pidFile); pid != 0 && !running {
			cancel(fmt.Errorf("the server (pid %d) exited as it started", pid))
			return
		}
	}
}

// State says whether the server's process still runs: "running", or how
// it is gone, for a test that can no longer reach it.
func (s *Server) State() string {
	if s.pid == 0 {
		return "of unknown pid"
	}
	fields, ok := statFields(s.pid)
	switch {
	case !ok:
		return fmt.Sprintf("gone (pid %d)", s.pid)
	case fields[0] != "Z":
		return fmt.Sprintf("running (pid %d)", s.pid)
	}
	// A zombie's wait status is field 52 of its stat (the 50th after the
	// command): how it ended.
	how := ""
	if len(fields) >= 50 {
		if code, err := strconv.Atoi(fields[49]); err == nil {
			if ws := syscall.WaitStatus(code); ws.Signaled() {
				how = ", killed by " + unix.SignalName(ws.Signal())
			} else {
				how = fmt.Sprintf(", exit status %d", ws.ExitStatus())
			}
		}
	}
	return fmt.Sprintf("exited (pid %d, not yet reaped%s)", s.pid, how)
}

// Stop interrupts the server and waits until it has exited. A server that
// is gone already is reaped; its exit status is no error.
func (s *Server) Stop() error {
	defer removeTemp(s.tempDir)
	err := s.DevServer.Stop()
	var exit *exec.ExitError
	switch {
	case err == nil, errors.As(err, &exit):
		return nil // waited for
	default:
		// The interrupt failed, so the SDK did not wait.
		reap(s.pid)
		return nil
	}
}

// removeTemp removes a run directory Start made, once its server is gone
// (the tests start hundreds of servers a run).
func removeTemp(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// reap kills and waits for pid if it is a child of this process that no
// one has waited for yet (the pid file of a failed start, or of a server
// whose interrupt failed).
func reap(pid int) {
	if pid <= 0 || !childOfOurs(pid) {
		return
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	_ = p.Kill()
	_, _ = p.Wait()
}

// childOfOurs tells whether this process is pid's parent.
func childOfOurs(pid int) bool {
	fields, ok := statFields(pid)
	return ok && len(fields) >= 2 && fields[1] == strconv.Itoa(os.Getpid())
}

// statFields are the fields of pid's /proc stat after its command (which
// may hold spaces): its state first, then its parent's pid. None if pid
// is gone.
func statFields(pid int) ([]string, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	stat := string(raw)
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	return fields, len(fields) > 0
}

func uiPort(p int) string {
	if p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// Cleanup kills a dev server that a crashed run started from runDir and
// left running; it returns what it killed.
func Cleanup(runDir, path string) ([]string, error) {
	return childproc.Cleanup(filepath.Join(runDir, "pids"), filepath.Dir(path))
}
