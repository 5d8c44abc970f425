package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, func() {
		if qmDir != "" {
			_ = os.RemoveAll(qmDir)
		}
	})
}

var (
	qmOnce sync.Once
	qmDir  string
	qmErr  error
)

// buildQM builds qm from the module's root once for every suite of the
// package, with the race detector when the tests have it (so that the
// packages compiled for them are reused), and returns its path.
func buildQM(t testing.TB) string {
	t.Helper()
	qmOnce.Do(func() {
		if qmDir, qmErr = os.MkdirTemp("", "qm-e2e-"); qmErr != nil {
			return
		}
		args := []string{"build", "-o", filepath.Join(qmDir, "qm")}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			qmErr = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	require.NoError(t, qmErr)
	return filepath.Join(qmDir, "qm")
}

// processEnv is what the suites that run qm as processes on the package's
// cluster and dev server share: qm, built once, a System (for plans, in a
// namespace of the test's own) and the flags that point a qm process at
// both.
type processEnv struct {
	qm     string
	kube   *testenv.Cluster
	s      *testenv.System
	common []string
}

func newProcessEnv(t *testing.T) processEnv {
	t.Helper()
	e := startProcessEnv(t, false)
	e.s.Temporal = testenv.Temporal(t)
	// The System's namespace is the processes' catalog, as the release
	// namespace is the chart's. An environment variable rather than a flag:
	// an earlier release, which an upgrade test runs, has no such flag.
	t.Setenv("QM_CATALOG_NAMESPACES", e.s.Namespace)
	return e
}

// newIsolatedProcessEnv is newProcessEnv for a test that runs beside the
// package's other parallel tests (it calls t.Parallel): its processes keep
// to its namespace (--watch-namespaces) and to a Temporal namespace of its
// own (testenv.OwnTemporalNamespace), as two Quartermasters on one cluster
// do. Only this release's qm has those flags.
func newIsolatedProcessEnv(t *testing.T) processEnv {
	t.Helper()
	e := startProcessEnv(t, true)
	tc, temporalNamespace := testenv.OwnTemporalNamespace(t)
	e.s.Temporal = tc
	e.common = append(e.common, "--temporal-namespace", temporalNamespace,
		"--catalog-namespaces", e.s.Namespace, "--watch-namespaces", e.s.Namespace)
	return e
}

// startProcessEnv is what both kinds of processEnv share: the qm binary,
// the cluster, a namespace with a service, and the flags that reach the
// cluster and the shared Temporal.
func startProcessEnv(t *testing.T, parallel bool) processEnv {
	t.Helper()
	e := processEnv{qm: buildQM(t), kube: testenv.Kubernetes(t), s: testenv.Start(t, testenv.Parts{Parallel: parallel})}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, e.kube.Kubeconfig, 0o600))
	e.common = []string{"--kubeconfig", kubeconfig, "--temporal-address", testenv.TemporalAddress(t), "--log-level", "info"}
	return e
}
