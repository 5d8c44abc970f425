// Package testenv gives integration tests a real Kubernetes cluster and a
// real Temporal dev server, each started at most once per test binary and
// only if a test asks for it. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and in a test:
//
//	kube := testenv.Kubernetes(t)   // kube.Client, kube.Config
//	tc := testenv.Temporal(t)       // a client of the dev server
//
// The cluster is the one `qm dev` runs: the API server with the
// controllers, the scheduler and simulated nodes. BareKubernetes is the API
// server alone, for measuring what it costs.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/workflows/runs"
)

// Cluster is the shared API server of a test binary.
type Cluster struct {
	Config *rest.Config
	Client ctrlclient.Client
	// Kubeconfig reaches the API server as Config does, for kubectl.
	Kubeconfig []byte
	// AuditLog is the API server's audit log of every request a service
	// account makes (controlplane.Options.Audit); empty on the bare one.
	AuditLog string
	// EtcdURL is the cluster's etcd (CompactEtcd).
	EtcdURL string
}

// sharedCluster is a cluster started at most once per test binary.
type sharedCluster struct {
	once    sync.Once
	cp      *controlplane.ControlPlane
	cluster *Cluster
	err     error
}

var (
	full, bare sharedCluster

	temporalOnce sync.Once
	temporalSrv  TemporalServer
	temporalErr  error
)

// Main runs the tests of a package and then stops the servers they
// started, and runs cleanups (what the package made for all its tests).
func Main(m *testing.M, cleanups ...func()) {
	// The servers start through the test binary itself (internal/childproc),
	// so that they die with it.
	childproc.Run()
	flag.Parse()
	if b := flag.Lookup("test.bench"); b == nil || b.Value.String() == "" || BenchSmoke() {
		// The test process runs Quartermaster's worker and watcher for
		// every test at once: its collector runs as the servers' does. (A
		// render process never gets here: renderproc serves from its
		// init, and takes GOGC from the environment.)
		ServerEnv = []string{"GOGC=" + strconv.Itoa(testsGCPercent)}
		debug.SetGCPercent(testsGCPercent)
	}
	// The workers the tests run as processes (qm worker) inherit it.
	_ = os.Setenv("QM_DEADLOCK_TIMEOUT", DeadlockTimeout.String())
	// The APIs the tests run as processes, several at once, serve their
	// admin API on a free port and no metrics unless a test asks: the
	// defaults are fixed ports. (The releases that came before ignore both.)
	_ = os.Setenv("QM_ADMIN_LISTEN", "127.0.0.1:0")
	_ = os.Setenv("QM_API_METRICS_ADDR", "0")
	// Controllers under test log through controller-runtime; without a
	// logger it prints a warning with a stack trace instead.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	for _, cleanup := range cleanups {
		cleanup()
	}
	if temporalSrv != nil {
		if err := temporalSrv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stopping Temporal:", err)
		}
	}
	for _, c := range []*sharedCluster{&full, &bare} {
		if c.cp != nil {
			if err := c.cp.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "testenv: stopping the cluster:", err)
			}
		}
	}
	os.Exit(code)
}

// DeadlockTimeout is the test workers' deadlock detection timeout: the
// workflow task timeout instead of the SDK's 1 s. Under the race detector,
// with more tests than cores, workflow code that never blocks took over a
// second between yields (TMPRL1101 in a run of the starter tests, a mass
// update among them); each such task failed and was retried after a
// backoff that held every query to the run, and a test asking for the
// run's progress failed on that. Code that really blocks still fails its
// task, within the time the task had anyway.
const DeadlockTimeout = runs.WorkflowTaskTimeout

// ServerEnv is added to the environment of the servers the tests start
// (kube-apiserver, etcd, the cluster's controllers and kwok, Temporal's dev
// server). Main sets it for tests and smoke runs: their garbage collector
// runs once the heap has grown to five times what is live, not twice
// (GOGC=400). The tests' servers are the suite's largest CPU cost
// (kube-apiserver's about 30 %, a fifth of which collecting garbage), and
// the machine's memory is what they may spend instead: a run of the api
// package's tests took 12 % less CPU with it (36.9 against 42.0 CPU-s;
// kube-apiserver's 12.4 against 15.2). Benchmarks measure what `qm dev`
// runs: with -bench (but for a smoke run) it stays empty, and the test
// process's collector keeps the default too.
var ServerEnv []string

const testsGCPercent = 400

// BinDir is where `make tools` puts kube-apiserver, etcd and temporal:
// $QM_BIN_DIR, or bin/ at the root of the module.
func BinDir() string {
	if dir := os.Getenv("QM_BIN_DIR"); dir != "" {
		return dir
	}
	dir, err := os.Getwd()
	if err != nil {
		return "bin"
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "bin")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "bin"
		}
		dir = parent
	}
}

// requireTool fails the test, with the command that fixes it, when a tool is
// missing. Integration tests never skip: a missing tool is a broken set-up.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(BinDir(), name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run `make tools` (make test does it for you)", path)
	}
	return path
}

// Kubernetes returns the shared cluster, with every CRD installed: the
// API server, kube-controller-manager, kube-scheduler and kwok's simulated
// nodes.
func Kubernetes(t testing.TB) *Cluster {
	t.Helper()
	for _, tool := range []string{"kube-controller-manager", "kube-scheduler", "kwok", controlplane.KwokStages} {
		requireTool(t, tool)
	}
	return full.get(t, false)
}

// BareKubernetes returns a shared API server with every CRD installed and
// nothing else: no controller, no scheduler, no node.
func BareKubernetes(t testing.TB) *Cluster {
	t.Helper()
	return bare.get(t, true)
}

func (c *sharedCluster) get(t testing.TB, bare bool) *Cluster {
	t.Helper()
	requireTool(t, "kube-apiserver")
	requireTool(t, "etcd")
	c.once.Do(func() {
		c.cp, c.err = controlplane.Start(controlplane.Options{BinDir: BinDir(), Bare: bare, Audit: !bare, NoFsync: true, Env: ServerEnv})
		if c.err != nil {
			return
		}
		var kube ctrlclient.Client
		kube, c.err = crds.NewClient(c.cp.Config)
		c.cluster = &Cluster{Config: c.cp.Config, Client: kube, Kubeconfig: c.cp.Kubeconfig, AuditLog: c.cp.AuditLog,
			EtcdURL: c.cp.EtcdURL}
	})
	if c.err != nil {
		t.Fatalf("starting the test cluster: %v", c.err)
	}
	return c.cluster
}

// Namespace creates a namespace named after the test. Namespaces are not
// deleted, so that a failed test's objects can still be read.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	p := strings.Trim(b.String(), "-")
	if len(p) > 40 {
		p = p[:40]
	}
	return strings.TrimRight(p, "-") + "-"
}

// Kubectl runs bin/kubectl against the cluster with stdin as its input, and
// returns its combined output; the test fails if kubectl does.
func (c *Cluster) Kubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	kubectl := requireTool(t, "kubectl")
	config := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(config, c.Kubeconfig, 0o600))
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", config}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// ServiceAccountToken is a token of the service account ns/name from the
// TokenRequest API, valid for an hour: what a pod of that account holds.
func (c *Cluster) ServiceAccountToken(t testing.TB, ns, name string) string {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	tok, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err, "a token for the service account %s/%s", ns, name)
	return tok.Status.Token
}
