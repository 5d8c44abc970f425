package devenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	temporalclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/devenv"
	"github.com/quartermaster/qm/internal/telemetry"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestDevStartsStopsAndRestarts runs `qm dev` as `make run` does, on free
// ports and a fresh data directory: everything comes up, Ctrl-C leaves no
// process behind, and a second start finds the first one's instances.
func TestMain(m *testing.M) { testenv.Main(m) }

func TestDevStartsStopsAndRestarts(t *testing.T) {
	dataDir := t.TempDir()
	// The API gets a listener that is open already. The other ports are
	// child processes': picked free, and checked by qm dev before it starts.
	apiLn, adminLn, metricsLn := listen(t), listen(t), listen(t)
	ports := testenv.FreePorts(t, 4)
	opts := devenv.Options{
		BinDir:       testenv.BinDir(),
		DataDir:      dataDir,
		KubePort:     ports[0],
		TemporalPort: ports[1],
		UIPort:       ports[2],
		MetricsPort:  ports[3],
		// As qm dev records them; once per test binary, as the registry is.
		TemporalMetrics:  temporalMetrics(t),
		Listen:           apiLn.Addr().String(),
		AdminListen:      adminLn.Addr().String(),
		APIMetricsListen: metricsLn.Addr().String(),
		Listeners:        api.Listeners{OSB: apiLn, Admin: adminLn, Metrics: metricsLn},
		Namespace:        "default",
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}

	stop, out := start(t, opts)

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", opts.UIPort))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "Temporal UI")

	resp, err = http.Get("http://" + opts.Listen + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "API /healthz")

	// The OSB API answers with the credentials qm dev printed, and serves
	// the sample catalog it installed.
	var osb api.Credentials
	raw, err := os.ReadFile(filepath.Join(dataDir, "osb-credentials.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &osb))
	assert.Contains(t, out.String(), "password "+osb.Password, "the banner shows the OSB credentials")
	status, catalogBody, _ := testenv.HTTP(http.MethodGet, "http://"+opts.Listen+"/v2/catalog", "", &osb, testenv.OSBHeader)
	assert.Equal(t, http.StatusOK, status, catalogBody)
	assert.Contains(t, catalogBody, `"name":"tenant-namespace"`)
	assert.Contains(t, catalogBody, `"name":"key-value-store"`)

	// A platform provisions the sample through the OSB API, end to end;
	// the admin API, with the credentials qm dev printed, shows it.
	osbCall := func(method, path, body string) (int, string) {
		status, got, _ := testenv.HTTP(method, "http://"+opts.Listen+path, body, &osb, testenv.OSBHeader)
		return status, got
	}
	provisionTenant(t, osbCall, "osb-1", 3, "the OSB provision succeeds")
	// The banner's metrics endpoint counts it: the operation by its plan,
	// and the instance in its state.
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", opts.MetricsPort)
	assert.Contains(t, out.String(), metricsURL, "the banner names the metrics")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := testenv.Scrape(c, metricsURL)
		assert.Equal(c, 1, m.Count("qm_operations_ended_total", "operation", "provision", "plan", testenv.TenantPlan, "outcome", "succeeded"))
		assert.Equal(c, 1, m.Count("qm_instances", "plan", testenv.TenantPlan, "state", "succeeded"))
		assert.Positive(c, m.Count("temporal_num_pollers", "poller_type", "workflow_task"), "the worker's pollers")
	}, 30*time.Second, 100*time.Millisecond, "qm dev's metrics")
	var admin api.Credentials
	raw, err = os.ReadFile(filepath.Join(dataDir, "admin-credentials.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &admin))
	assert.Contains(t, out.String(), fmt.Sprintf("curl -u %s:%s http://%s/admin/instances", admin.Username, admin.Password, opts.AdminListen),
		"the banner shows the admin API")
	status, _, _ = testenv.HTTP(http.MethodGet, "http://"+opts.Listen+"/admin/instances/default/osb-1", "", &admin, nil)
	assert.Equal(t, http.StatusNotFound, status, "not on the OSB API's port")
	apiMetrics := "http://" + opts.APIMetricsListen + "/metrics"
	assert.Contains(t, out.String(), apiMetrics, "the banner names the API's metrics")
	assert.Positive(t, testenv.Scrape(t, apiMetrics).Count("qm_api_requests_total"), "the API's metrics, on their own port")
	status, adminBody, _ := testenv.HTTP(http.MethodGet, "http://"+opts.AdminListen+"/admin/instances/default/osb-1", "", &admin, nil)
	assert.Equal(t, http.StatusOK, status, adminBody)
	assert.Contains(t, adminBody, `"state":"succeeded","description":"namespace tenant-`)
	assert.Contains(t, adminBody, `"workflow_id":"sfserviceinstance/default/osb-1"`)

	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	assert.Contains(t, out.String(), kubeconfig, "the banner names the kubeconfig")
	// Every kubectl line of the banner works as pasted: it names the
	// kubeconfig, or the line before exports it.
	assert.Contains(t, out.String(), "export KUBECONFIG="+kubeconfig+"\n")
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "kubectl ") {
			assert.Contains(t, line, "--kubeconfig "+kubeconfig, "a kubectl line of the banner: %q", line)
		}
	}
	assert.Contains(t, out.String(), fmt.Sprintf("http://127.0.0.1:%d", opts.UIPort), "the banner names the UI")
	kube := client(t, kubeconfig)
	keyValueStoresAreClaimable(t, osbCall, kube)
	var list apiextensionsv1.CustomResourceDefinitionList
	require.NoError(t, kube.List(context.Background(), &list))
	defs, err := crds.Definitions()
	require.NoError(t, err)
	var names []string
	for _, crd := range list.Items {
		names = append(names, crd.Name)
	}
	for _, d := range defs {
		assert.Contains(t, names, d.Name)
	}
	inst := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "survives-restart", Namespace: "default"},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{ServiceID: "s", PlanID: "p"},
	}
	require.NoError(t, kube.Create(context.Background(), inst))
	var nodes corev1.NodeList
	require.NoError(t, kube.List(context.Background(), &nodes))
	assert.Len(t, nodes.Items, 3, "the simulated nodes are registered")
	// A service-account token of this start, to use after the restart.
	token := serviceAccountToken(t, kubeconfig)

	// A second qm dev on the same ports fails early, naming the port.
	clash := opts
	clash.DataDir = t.TempDir()
	clash.Listeners = api.Listeners{OSB: listen(t), Admin: listen(t), Metrics: listen(t)}
	clash.Listen = clash.Listeners.OSB.Addr().String()
	clash.Out = io.Discard
	err = devenv.Run(context.Background(), clash)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("port %d (Kubernetes API server) is already in use", opts.KubePort))

	stop()
	assert.Empty(t, processesUsing(t, dataDir), "no process outlives qm dev")

	// The restart listens on the API's address again, as `make run` does.
	opts.Listeners = api.Listeners{}
	stop, out2 := start(t, opts)
	defer stop()
	kube = client(t, kubeconfig)
	var got osbv1alpha1.SFServiceInstance
	require.NoError(t, kube.Get(context.Background(), ctrlclient.ObjectKeyFromObject(inst), &got))
	assert.Equal(t, "p", got.Spec.PlanID)

	// The signing key is kept in the data directory: the old token still
	// authenticates (403 for what the account may not do, not 401).
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cfg = rest.AnonymousClientConfig(cfg)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "a token of the first start authenticates after the restart: %v", err)

	// The Temporal dev server dies, and its port is taken for a while: qm
	// dev restarts it with backoff, and operations carry on once it is back.
	temporalBack(t, opts, out2)
	provisionTenant(t, osbCall, "osb-2", 1, "a provision after the dev server came back succeeds")
}

// temporalBack kills qm dev's Temporal dev server and holds its port until
// two restarts have failed, the second a backoff of a second after the
// first; then it lets the port go and waits until qm dev says the server
// is back.
func temporalBack(t *testing.T, opts devenv.Options, out *testenv.SyncBuffer) {
	t.Helper()
	pid, running := childproc.Running(filepath.Join(opts.DataDir, "temporal", "pids", "temporal.pid"))
	require.True(t, running, "the dev server runs")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	addr := fmt.Sprintf("127.0.0.1:%d", opts.TemporalPort)
	var taken net.Listener
	require.Eventually(t, func() bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		taken = ln
		return true
	}, 10*time.Second, 10*time.Millisecond, "the dead server's port is free to take")
	seen := func(line string) time.Time {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), line) }, 30*time.Second, 20*time.Millisecond,
			"qm dev says %q:\n%s", line, out.String())
		return time.Now()
	}
	seen(fmt.Sprintf("The Temporal dev server (pid %d) died; restarting it", pid))
	first := seen("failed (try 1 of 5, next in 1s)")
	second := seen("failed (try 2 of 5, next in 2s)")
	assert.GreaterOrEqual(t, second.Sub(first), 900*time.Millisecond, "the second try waits out the first backoff")
	require.NoError(t, taken.Close())
	seen(fmt.Sprintf("The Temporal dev server is back at %s (try 3); operations carry on.", addr))
}

// serviceAccountToken returns a token of the default namespace's default
// service account.
func serviceAccountToken(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), "default",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// start runs devenv.Run until the banner is printed, and returns a function
// that stops it as Ctrl-C does and waits until it returned.
func start(t *testing.T, opts devenv.Options) (func(), *testenv.SyncBuffer) {
	t.Helper()
	out := &testenv.SyncBuffer{}
	opts.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- devenv.Run(ctx, opts) }()

	deadline := time.After(3 * time.Minute)
	for !strings.Contains(out.String(), "Quartermaster is running.") {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("qm dev returned before it was ready: %v\n%s%s", err, out.String(), logTails(opts.DataDir))
		case <-deadline:
			cancel()
			t.Fatalf("qm dev was not ready within 3 minutes:\n%s%s", out.String(), logTails(opts.DataDir))
		case <-time.After(100 * time.Millisecond):
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err, "qm dev stops cleanly")
			case <-time.After(2 * time.Minute):
				t.Fatal("qm dev did not stop within 2 minutes")
			}
		})
	}, out
}

// logTails are the last lines of each server's log under dataDir/logs:
// what a failed start's error points at, which CI keeps no copy of.
func logTails(dataDir string) string {
	files, _ := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
	var b strings.Builder
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		fmt.Fprintf(&b, "\n--- the end of %s:\n%s\n", file, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

func client(t *testing.T, kubeconfig string) ctrlclient.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	return c
}

// listen opens a listener on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// processesUsing lists the command lines of running processes that mention dir.
func processesUsing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		found = append(found, string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return found
}

// sdkMetrics records the Temporal SDK's metrics into controller-runtime's
// registry, which takes them once per process.
var sdkMetrics = sync.OnceValues(func() (temporalclient.MetricsHandler, error) {
	return telemetry.TemporalMetrics(ctrlmetrics.Registry, slog.Default())
})

func temporalMetrics(t *testing.T) temporalclient.MetricsHandler {
	h, err := sdkMetrics()
	require.NoError(t, err)
	return h
}

// TestDevOnAnExistingClusterAndTemporal: with a kubeconfig and a Temporal
// of the user's, qm dev starts neither server of its own, registers
// Quartermaster's search attributes on that Temporal (it had none), and an
// OSB provision runs there: its instance on the user's cluster, its run in
// the user's Temporal.
func TestDevOnAnExistingClusterAndTemporal(t *testing.T) {
	ctx := context.Background()
	kube := testenv.Kubernetes(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePorts(t, 1)[0])
	temporal, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  filepath.Join(testenv.BinDir(), "temporal"),
		ClientOptions: &temporalclient.Options{HostPort: addr, Namespace: "default"},
		LogLevel:      "warn",
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = temporal.Stop() })
	attributes := func() map[string]enumspb.IndexedValueType {
		t.Helper()
		resp, err := temporal.Client().OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
		require.NoError(t, err)
		return resp.CustomAttributes
	}
	for _, key := range runs.SearchAttributeKeys() {
		require.NotContains(t, attributes(), key.GetName(), "the user's Temporal starts without Quartermaster's search attributes")
	}

	dataDir := t.TempDir()
	apiLn := listen(t)
	stop, out := start(t, devenv.Options{
		BinDir:     testenv.BinDir(),
		DataDir:    dataDir,
		Kubeconfig: kubeconfig,
		Temporal: func(ctx context.Context) (temporalclient.Client, error) {
			return temporalclient.DialContext(ctx, temporalclient.Options{HostPort: addr, Namespace: "default"})
		},
		TemporalAddress: addr,
		Namespace:       "default",
		Listen:          apiLn.Addr().String(),
		Listeners:       api.Listeners{OSB: apiLn},
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer stop()
	assert.NotContains(t, out.String(), "Starting Kubernetes", "no cluster of its own")
	assert.NotContains(t, out.String(), "Starting the Temporal dev server", "no Temporal of its own")
	assert.NoDirExists(t, filepath.Join(dataDir, "etcd"))
	assert.NoFileExists(t, filepath.Join(dataDir, "temporal.db"))
	assert.Contains(t, out.String(), kubeconfig, "the banner names the user's kubeconfig")
	for _, key := range runs.SearchAttributeKeys() {
		assert.Equal(t, enumspb.INDEXED_VALUE_TYPE_KEYWORD, attributes()[key.GetName()], "qm dev registered %s", key.GetName())
	}

	var osb api.Credentials
	raw, err := os.ReadFile(filepath.Join(dataDir, "osb-credentials.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &osb))
	osbCall := func(method, path, body string) (int, string) {
		status, got, _ := testenv.HTTP(method, "http://"+apiLn.Addr().String()+path, body, &osb, testenv.OSBHeader)
		return status, got
	}
	provisionTenant(t, osbCall, "on-the-users", 1, "the OSB provision succeeds")
	var inst osbv1alpha1.SFServiceInstance
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: devenv.SampleNamespace, Name: "on-the-users"}, &inst),
		"the instance is on the user's cluster")
	assert.Equal(t, osbv1alpha1.StateSucceeded, inst.Status.State)
	run, err := temporal.Client().DescribeWorkflowExecution(ctx, "sfserviceinstance/"+devenv.SampleNamespace+"/on-the-users", "")
	require.NoError(t, err, "the provision ran in the user's Temporal")
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, run.WorkflowExecutionInfo.Status)
}

// provisionTenant provisions the sample tenant-namespace plan as id with
// pods, through OSB (call), and waits until it succeeded.
func provisionTenant(t *testing.T, call func(method, path, body string) (int, string), id string, pods int, why string) {
	t.Helper()
	status, body := call(http.MethodPut, "/v2/service_instances/"+id+"?accepts_incomplete=true", fmt.Sprintf(
		`{"service_id": "6f3c1f8e-4c5e-4a55-9b53-6f1d2b7a9c01", "plan_id": "0a7b4a4e-2d0e-4f3e-8a53-3e1f0c7d5b11", "organization_guid": "org", "space_guid": "space", "parameters": {"pods": %d}}`, pods))
	require.Equal(t, http.StatusAccepted, status, body)
	require.Eventually(t, func() bool {
		status, body := call(http.MethodGet, "/v2/service_instances/"+id+"/last_operation?operation=provision", "")
		return status == http.StatusOK && strings.Contains(body, `"state":"succeeded"`)
	}, time.Minute, 100*time.Millisecond, why)
}
