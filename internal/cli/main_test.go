package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAPICommand runs `qm api` as an operator would, with a kubeconfig and
// credentials from the environment, and talks to it over TCP: the catalog
// of its namespace, a provision recorded as an instance, the admin API,
// and a clean stop.
func TestAPICommand(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	for _, manifest := range []string{
		fmt.Sprintf(`{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFService", "metadata": {"name": "svc", "namespace": %q},
			"spec": {"name": "svc", "id": %q, "description": "d", "bindable": true}}`, ns, ns+"-svc"),
		fmt.Sprintf(`{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFPlan", "metadata": {"name": "plan", "namespace": %q},
			"spec": {"name": "plan", "id": %q, "description": "d", "serviceId": %q, "manager": {"async": true}}}`, ns, ns+"-plan", ns+"-svc"),
	} {
		obj := &unstructured.Unstructured{}
		require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object))
		require.NoError(t, kube.Client.Create(context.Background(), obj))
	}

	t.Setenv("QM_OSB_USERNAME", "platform")
	t.Setenv("QM_OSB_PASSWORD", "osb-secret")
	t.Setenv("QM_ADMIN_USERNAME", "operator")
	t.Setenv("QM_ADMIN_PASSWORD", "admin-secret")
	cmd := NewRootCommand()
	// Port 0: qm api binds a free port and logs which, as an operator reads it.
	cmd.SetArgs([]string{"api", "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--namespace", ns, "--log-level", "info"})
	var logs testenv.SyncBuffer
	cmd.SetErr(&logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "qm api stops cleanly")
		case <-time.After(30 * time.Second):
			t.Error("qm api did not stop")
		}
	})

	served := regexp.MustCompile(`msg="serving the API" address=(127\.0\.0\.1:\d+) namespace=\S+ admin=(127\.0\.0\.1:\d+) metrics=(127\.0\.0\.1:\d+)`)
	var addr, adminAddr, metricsAddr string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := served.FindStringSubmatch(logs.String())
		require.Len(c, m, 4, "qm api logs its addresses")
		addr, adminAddr, metricsAddr = m[1], m[2], m[3]
	}, 30*time.Second, 20*time.Millisecond)
	callAt := func(at, method, path, user, password, body string) (int, string) {
		status, got, _ := testenv.HTTP(method, "http://"+at+path, body, &api.Credentials{Username: user, Password: password}, testenv.OSBHeader)
		return status, got
	}
	call := func(method, path, user, password, body string) (int, string) {
		return callAt(addr, method, path, user, password, body)
	}
	require.Eventually(t, func() bool {
		status, body := call(http.MethodGet, "/v2/catalog", "platform", "osb-secret", "")
		return status == http.StatusOK && strings.Contains(body, `"id":"`+ns+`-plan"`)
	}, 30*time.Second, 50*time.Millisecond, "qm api serves the catalog of its namespace")

	status, _ := call(http.MethodGet, "/v2/catalog", "platform", "wrong", "")
	assert.Equal(t, http.StatusUnauthorized, status)
	status, body := call(http.MethodPut, "/v2/service_instances/cmd-1?accepts_incomplete=true", "platform", "osb-secret",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, ns+"-svc", ns+"-plan"))
	assert.Equal(t, http.StatusAccepted, status, body)
	assert.JSONEq(t, `{"operation": "provision"}`, body)
	status, body = callAt(adminAddr, http.MethodGet, "/admin/instances/"+ns+"/cmd-1", "operator", "admin-secret", "")
	assert.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"state":"in_queue"`, "no worker runs here: the request waits in the queue")
	status, _ = callAt(adminAddr, http.MethodGet, "/admin/instances", "platform", "osb-secret", "")
	assert.Equal(t, http.StatusUnauthorized, status, "the admin API has its own credentials")
	status, _ = call(http.MethodGet, "/admin/instances", "operator", "admin-secret", "")
	assert.Equal(t, http.StatusNotFound, status, "and its own port")
	status, body = callAt(metricsAddr, http.MethodGet, "/metrics", "", "", "")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `qm_api_requests_total{code="202",method="PUT",route="/v2/service_instances/{instance_id}"} 1`)
}

// TestAPICommandTLSNeedsACertificate: client CAs without a serving
// certificate stop `qm api` at once, saying what is missing.
func TestAPICommandTLSNeedsACertificate(t *testing.T) {
	cmd := NewRootCommand()
	cmd.SetArgs([]string{"api", "--listen", "127.0.0.1:0", "--tls-client-ca-file", "ca.crt"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(context.Background())
	require.Error(t, err)
	assert.Equal(t, "--tls-client-ca-file needs HTTPS: set --tls-cert-file and --tls-key-file too", err.Error())
}
