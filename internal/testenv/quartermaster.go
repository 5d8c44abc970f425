package testenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"k8s.io/client-go/rest"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/catalog"
	"github.com/quartermaster/qm/internal/devserver"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/worker"
)

// Catalog starts a catalog cache of the cluster cfg reaches, synced, until
// the test ends.
func Catalog(t testing.TB, cfg *rest.Config) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.New(cfg, crds.NewScheme())
	if err != nil {
		t.Fatalf("creating the catalog: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := cat.Start(ctx); err != nil {
		t.Fatalf("starting the catalog: %v", err)
	}
	return cat
}

// Quartermaster runs a worker, with a client of its own as `qm worker`
// has, and the watcher against cfg and tc until the test ends.
func Quartermaster(t testing.TB, cfg *rest.Config, tc client.Client, cat *catalog.Catalog, opts starter.WatcherOptions) {
	t.Helper()
	kube, err := crds.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(tc, kube, cat)
	if err := w.Start(); err != nil {
		t.Fatalf("starting the worker: %v", err)
	}
	t.Cleanup(w.Stop)
	Watch(t, cfg, tc, opts)
}

// Watch runs Quartermaster's watcher against cfg and tc until the test
// ends; the test fails if it stops with an error.
func Watch(t testing.TB, cfg *rest.Config, tc client.Client, opts starter.WatcherOptions) {
	t.Helper()
	mgr, err := starter.NewWatcher(cfg, tc, opts)
	if err != nil {
		t.Fatalf("creating the watcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the watcher stopped: %v", err)
		}
	})
}

// FileTemporal starts a dev server of the test's own, with SQLite in a
// file as `qm dev` runs it, for benchmarks whose figures should be those of
// the embedded default; it stops when the test ends.
func FileTemporal(t testing.TB) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, devserver.Options{
		Path:   requireTool(t, "temporal"),
		DBFile: filepath.Join(t.TempDir(), "temporal.db"),
	})
	if err != nil {
		t.Fatalf("starting a file-backed Temporal dev server: %v", err)
	}
	t.Cleanup(func() { srv.Client().Close(); _ = srv.Stop() })
	return srv.Client()
}

// BenchN is the number of instances a benchmark provisions: QM_BENCH_N, or
// 1000.
func BenchN() int {
	if v, err := strconv.Atoi(os.Getenv("QM_BENCH_N")); err == nil && v > 0 {
		return v
	}
	return 1000
}

// SyncBuffer collects the output of goroutines that a test reads.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
