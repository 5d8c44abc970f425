package testenv

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster/qm/internal/devserver"
)

// BenchClients is the number of parallel clients a benchmark creates
// resources or starts workflows from.
const BenchClients = 16

// Parallel runs do(0..n-1) on BenchClients goroutines and fails the
// benchmark on the first error.
func Parallel(t testing.TB, n int, do func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range BenchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// CPU returns the CPU time used so far by this process ("qm", which runs
// the worker and the watcher in the benchmarks) and by each of its children
// (kube-apiserver, etcd, temporal), from /proc. A child's own children count
// as the child's (PostgreSQL's backends as postgres), those it has reaped
// too; the services of a Temporal cluster count apart, as
// temporal-<service>.
func CPU() map[string]time.Duration {
	type proc struct {
		ppid int
		name string
		cpu  time.Duration
	}
	procs := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17), after the ")".
		line := string(raw)
		comm := line[strings.Index(line, "(")+1 : strings.LastIndex(line, ")")]
		fields := strings.Fields(line[strings.LastIndex(line, ")")+2:])
		ppid, _ := strconv.Atoi(fields[1])
		var ticks int64
		times := fields[11:15]
		if pid == os.Getpid() {
			times = fields[11:13] // not its reaped children: the servers it restarted
		}
		for _, f := range times {
			n, _ := strconv.ParseInt(f, 10, 64)
			ticks += n
		}
		if comm == "temporal-server" {
			comm = "temporal-" + serviceOf(pid)
		}
		procs[pid] = proc{ppid: ppid, name: comm, cpu: time.Duration(ticks) * 10 * time.Millisecond} // USER_HZ is 100 on Linux
	}
	self := os.Getpid()
	out := map[string]time.Duration{}
	for pid, p := range procs {
		// The child of this process that pid descends from, if any.
		child := pid
		for child != self && procs[child].ppid != self && procs[child].ppid > 1 {
			child = procs[child].ppid
		}
		switch {
		case pid == self:
			out["qm"] += p.cpu
		case procs[child].ppid == self:
			out[procs[child].name] += p.cpu
		}
	}
	return out
}

// serviceOf is the --service a temporal-server process runs.
func serviceOf(pid int) string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(raw), "\x00")
	for i, a := range args {
		if a == "--service" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return "server"
}

// CPUUsed is the CPU every process used between two readings of CPU,
// divided by n: what a benchmark reports per instance.
func CPUUsed(before, after map[string]time.Duration, n int) time.Duration {
	var sum time.Duration
	for name, d := range after {
		sum += d - before[name]
	}
	return sum / time.Duration(n)
}

// CPUPer formats the CPU each process used between two readings of CPU,
// divided by n, and their sum: " etcd 2.9ms kube-apiserver 14.3ms ... = 37.6ms".
func CPUPer(before, after map[string]time.Duration, n int) string {
	var b strings.Builder
	var sum time.Duration
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := (after[name] - before[name]) / time.Duration(n)
		sum += d
		fmt.Fprintf(&b, " %s %.1fms", name, d.Seconds()*1000)
	}
	fmt.Fprintf(&b, " = %.1fms", sum.Seconds()*1000)
	return b.String()
}

// FileTemporal starts a dev server of the test's own, with SQLite in a
// file as `qm dev` runs it, for benchmarks whose figures should be those of
// the embedded default; it stops when the test ends.
func FileTemporal(t testing.TB) client.Client {
	t.Helper()
	return FileTemporalServer(t).Client()
}

// FileTemporalServer is FileTemporal's server, for a test that runs qm as
// processes and gives them its address.
func FileTemporalServer(t testing.TB) TemporalServer {
	t.Helper()
	return devTemporal{ownServer(t, devserver.Options{DBFile: filepath.Join(t.TempDir(), "temporal.db")})}
}

// FileTemporalWith is FileTemporal with dynamic config that replaces the
// dev server's own (internal/devserver), for a benchmark that compares a
// setting with its absence.
func FileTemporalWith(t testing.TB, dynamicConfig map[string]string) client.Client {
	t.Helper()
	return ownTemporal(t, devserver.Options{DBFile: filepath.Join(t.TempDir(), "temporal.db"), DynamicConfig: dynamicConfig})
}

// ownTemporal starts a dev server of the test's own with opts (its path
// filled in); it stops when the test ends.
func ownTemporal(t testing.TB, opts devserver.Options) client.Client {
	t.Helper()
	return ownServer(t, opts).Client()
}

// ownServer is ownTemporal's server.
func ownServer(t testing.TB, opts devserver.Options) *devserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts.Path = requireTool(t, "temporal")
	srv, err := startDevServer(ctx, opts)
	if err != nil {
		t.Fatalf("starting a Temporal dev server of the test's own: %v", err)
	}
	t.Cleanup(func() { srv.Client().Close(); _ = srv.Stop() })
	return srv
}

// BenchSmokeN is every benchmark's size in a smoke run (QM_BENCH_SMOKE,
// which `make test` sets): each benchmark runs once, small and with short
// windows, so that one that breaks fails the suite, while its figures are
// left to `make bench`.
const BenchSmokeN = 20

// BenchSmoke says whether this is a smoke run (QM_BENCH_SMOKE is set).
func BenchSmoke() bool { return os.Getenv("QM_BENCH_SMOKE") != "" }

// BenchN is the number of instances a benchmark provisions: QM_BENCH_N, or
// 1000 (BenchSmokeN in a smoke run).
func BenchN() int { return BenchSize("QM_BENCH_N", 1000) }

// BenchSize is a benchmark's size: the variable env if it is set to a
// positive number, BenchSmokeN in a smoke run, def otherwise.
func BenchSize(env string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return v
	}
	if BenchSmoke() {
		return BenchSmokeN
	}
	return def
}

// BenchWindow is a measuring window of a benchmark: def, or a tenth of it in
// a smoke run, where only the path through the benchmark is checked.
func BenchWindow(def time.Duration) time.Duration {
	if BenchSmoke() {
		return def / 10
	}
	return def
}

// BenchVerdict is the last line of a benchmark that has a target: the
// figure, the target, and whether this run met it. It does not fail the
// run (figures are noisy on a shared machine; the closing note reports
// them); a smoke run's figures say nothing, and it says so.
func BenchVerdict(what string, figure, target float64, unit string, lowerIsBetter bool) string {
	met := figure >= target
	if lowerIsBetter {
		met = figure <= target
	}
	verdict := "MET"
	if !met {
		verdict = "NOT MET"
	}
	if BenchSmoke() {
		verdict += " (a smoke run: the figure is not a measurement)"
	}
	cmp := "≥"
	if lowerIsBetter {
		cmp = "≤"
	}
	return fmt.Sprintf("  target: %s %s %g %s; this run %.3g %s: %s\n", what, cmp, target, unit, figure, unit, verdict)
}

// SyncBuffer collects the output of goroutines that a test reads. With
// Max set, it keeps the first Max bytes and takes the rest without keeping
// it (the start of a server that runs on); with Tail too, the last Max
// bytes (what a server said before it went).
type SyncBuffer struct {
	Max  int
	Tail bool
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.Max > 0 && b.Tail:
		b.buf.Write(p)
		b.buf.Next(max(b.buf.Len()-b.Max, 0))
		return len(p), nil
	case b.Max > 0:
		b.buf.Write(p[:min(max(b.Max-b.buf.Len(), 0), len(p))])
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ProfileAPIServer starts a CPU profile of kube-apiserver of seconds, when
// QM_BENCH_PROFILE names a directory, and returns a function that waits
// for it and writes it there as name.pprof (`go tool pprof -top` reads
// it). Without QM_BENCH_PROFILE it does nothing.
func ProfileAPIServer(t testing.TB, kube *Cluster, name string, seconds int) (wait func()) {
	dir := os.Getenv("QM_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	cs, err := kubernetes.NewForConfig(kube.Config)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
			Timeout(time.Duration(seconds+30) * time.Second).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), raw, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			t.Errorf("profiling kube-apiserver: %v", err)
		}
	}
}

// ProfileSelf starts a CPU profile of this process (qm's worker and
// watcher in the benchmarks, with the benchmark's own clients), when
// QM_BENCH_PROFILE names a directory, and returns a function that stops it
// and writes it there as name.pprof. Without QM_BENCH_PROFILE, or under
// go test -cpuprofile (a process has one CPU profile at a time), it does
// nothing.
func ProfileSelf(t testing.TB, name string) (stop func()) {
	dir := os.Getenv("QM_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	require.NoError(t, err)
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Logf("no CPU profile of %s: %v", name, err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Errorf("writing the CPU profile of %s: %v", name, err)
		}
	}
}

// Listeners starts n loopback listeners that accept every connection and
// close it at once, counting them in accepted: what the health checks'
// tcp probes reach in the benchmarks. It returns their ports; they close
// when the test ends.
func Listeners(t testing.TB, n int, accepted *atomic.Int64) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_ = c.Close()
			}
		}()
	}
	return ports
}
