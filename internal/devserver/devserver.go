// Package devserver runs the Temporal CLI's development server (bin/temporal,
// built by `make tools`) with Quartermaster's search attributes registered.
// `qm dev` runs it with SQLite persistence and the Web UI; the integration
// tests run it in memory, headless, on a free port.
package devserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/quartermaster/qm/internal/childproc"
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
	// Address is the frontend's host:port; empty picks a free port on localhost.
	Address string
	// UIPort serves the Web UI; 0 runs headless.
	UIPort int
	// Namespace is registered at start; empty means "default".
	Namespace string
	// Out receives the server's output; nil discards it.
	Out io.Writer
	// Logger is used by the returned client; nil uses slog's default.
	Logger *slog.Logger
	// DynamicConfig sets dynamic config values of the server, such as
	// limit.historyCount.suggestContinueAsNew.
	DynamicConfig map[string]string
}

// Start starts the dev server and returns once it accepts clients.
func Start(ctx context.Context, opts Options) (*testsuite.DevServer, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var attrs []temporal.SearchAttributeUpdate
	for _, key := range runs.SearchAttributeKeys() {
		attrs = append(attrs, key.ValueSet(""))
	}
	// The CLI turns the search-attribute cache off so that attributes added
	// at run time show at once; Quartermaster registers its attributes
	// before the first start, and with the cache off every workflow start
	// reads them from SQLite again (a fifth of the server's CPU per start).
	extra := []string{"--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false"}
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
	runDir := opts.RunDir
	if runDir == "" {
		var err error
		if runDir, err = os.MkdirTemp("", "qm-temporal-"); err != nil {
			return nil, err
		}
	}
	if _, err := Cleanup(runDir, opts.Path); err != nil {
		return nil, err
	}
	linkDir, err := childproc.Links(filepath.Join(runDir, "bin"), filepath.Dir(opts.Path), filepath.Join(runDir, "pids"), filepath.Base(opts.Path))
	if err != nil {
		return nil, err
	}
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: filepath.Join(linkDir, filepath.Base(opts.Path)),
		ClientOptions: &client.Options{
			HostPort:  opts.Address,
			Namespace: opts.Namespace,
			Logger:    log.NewStructuredLogger(opts.Logger),
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
	if err != nil {
		return nil, fmt.Errorf("starting the Temporal dev server %s: %w", opts.Path, err)
	}
	return srv, nil
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
