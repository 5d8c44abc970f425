package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestAdminAPIMetricsAndLogs: the admin API lists instances with their
// workflow IDs behind its own credentials; every request is counted per
// route and status and logged with its request identity, and no credential
// reaches the log.
func TestAdminAPIMetricsAndLogs(t *testing.T) {
	var logs testenv.SyncBuffer
	s := testenv.Start(t, testenv.Parts{API: true, APILogger: slog.New(slog.NewJSONHandler(&logs, nil))})
	plan := s.Plan("async", "  manager: {async: true}", testenv.Templates("instant"))

	status, body, _ := s.Do(http.MethodPut, "/v2/service_instances/adm-1?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"password": "hunter2"}}`, s.ServiceID, plan),
		map[string]string{"X-Broker-API-Request-Identity": "req-7"})
	require.Equal(t, http.StatusAccepted, status, body)

	admin := func(path string, auth api.Credentials) (int, string) {
		status, body, _ := testenv.HTTP(http.MethodGet, s.AdminURL+path, "", &auth, nil)
		return status, body
	}
	status, body = admin("/admin/instances?namespace="+s.Namespace, testenv.AdminCredentials)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, fmt.Sprintf(`{"instances": [{"namespace": %q, "name": "adm-1", "instance_id": "adm-1", "service_id": %q,
		"plan_id": %q, "state": "in_queue", "operation": "provision", "workflow_id": "sfserviceinstance/%s/adm-1"}]}`,
		s.Namespace, s.ServiceID, plan, s.Namespace), body)
	// The request wrote its record once, the create: its state stays
	// empty, which every reader takes for in_queue, until a run writes it.
	var inst osbv1alpha1.SFServiceInstance
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "adm-1"}, &inst))
	assert.Empty(t, inst.Status.State)
	for _, f := range inst.ManagedFields {
		assert.NotEqual(t, "status", f.Subresource, "the request wrote no status: %s %s", f.Manager, f.Operation)
	}
	status, body = admin("/admin/instances/"+s.Namespace+"/adm-1", testenv.AdminCredentials)
	assert.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"workflow_id":"sfserviceinstance/`+s.Namespace+`/adm-1"`)
	status, _ = admin("/admin/instances/"+s.Namespace+"/nobody", testenv.AdminCredentials)
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = admin("/admin/instances", testenv.OSBCredentials)
	assert.Equal(t, http.StatusUnauthorized, status, "the OSB credentials do not open the admin API")

	off := httptest.NewServer((&api.Server{Kube: s.Kube.Client, Offerings: s.API.Offerings, OSB: testenv.OSBCredentials,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).AdminHandler())
	t.Cleanup(off.Close)
	resp, err := http.Get(off.URL + "/admin/instances")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "without credentials the admin API is off")

	status, _, _ = testenv.HTTP(http.MethodGet, s.URL+"/admin/instances", "", &testenv.AdminCredentials, nil)
	assert.Equal(t, http.StatusNotFound, status, "the admin API is not on the OSB port")
	status, _, _ = testenv.HTTP(http.MethodGet, s.URL+"/metrics", "", nil, nil)
	assert.Equal(t, http.StatusNotFound, status, "nor are the metrics")

	resp, err = http.Get(s.APIMetrics)
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, line := range []string{
		`qm_api_requests_total{code="202",method="PUT",route="/v2/service_instances/{instance_id}"} 1`,
		`qm_api_requests_total{code="401",method="GET",route="/admin/*"} 1`, // refused before routing ends
		`qm_api_requests_total{code="404",method="GET",route="/admin/instances/{namespace}/{name}"} 1`,
		`qm_api_request_duration_seconds_count{method="GET",route="/admin/instances/{namespace}/{name}"} 2`,
	} {
		assert.Contains(t, string(metrics), "\n"+line+"\n", "/metrics has %s", line)
	}

	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"status":401`) }, 5*time.Second, 10*time.Millisecond)
	var put map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if entry["method"] == "PUT" {
			put = entry
		}
	}
	require.NotNil(t, put, "the PUT is logged")
	assert.Equal(t, "req-7", put["requestIdentity"])
	assert.InDelta(t, 202, put["status"], 0)
	assert.Equal(t, "/v2/service_instances/{instance_id}", put["route"])
	for _, secret := range []string{testenv.OSBCredentials.Password, testenv.AdminCredentials.Password, "hunter2", "Basic "} {
		assert.NotContains(t, logs.String(), secret, "credentials and parameters stay out of the log")
	}
}

// TestAdminTakesJSONOnly: a post to the admin API that does not say its
// body is JSON, as a web page's form or plain-text post would, is refused
// with 415 before it reaches a mass update, with the admin's credentials
// or not asked for first; a JSON one reaches the handler.
func TestAdminTakesJSONOnly(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true})
	post := func(path, contentType, body string, auth *api.Credentials) (int, string) {
		status, got, _ := testenv.HTTP(http.MethodPost, s.AdminURL+path, body, auth, map[string]string{"Content-Type": contentType})
		return status, got
	}
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x", ""} {
		status, body := post("/admin/mass-updates", ct, `{"name": "x", "all": true}`, &testenv.AdminCredentials)
		assert.Equal(t, http.StatusUnsupportedMediaType, status, "%q: %s", ct, body)
		assert.Contains(t, body, "the admin API takes application/json only", ct)
		status, _ = post("/admin/mass-updates/x/cancel", ct, "", &testenv.AdminCredentials)
		assert.Equal(t, http.StatusUnsupportedMediaType, status, "a steering post of %q", ct)
	}
	status, _ := post("/admin/mass-updates", "text/plain", "", nil)
	assert.Equal(t, http.StatusUnauthorized, status, "credentials are asked for first")
	status, body := post("/admin/mass-updates", "application/json; charset=utf-8", `{"name": "x"}`, &testenv.AdminCredentials)
	assert.Equal(t, http.StatusBadRequest, status, "JSON reaches the handler, which refuses a run that selects nothing: %s", body)
	assert.Contains(t, body, "select instances with plans")
}

// TestInternalErrorsKeepTheirCause: a 500 names the step that failed and
// points to the log, which has the cause; the client never reads what the
// API server or Temporal said (here, the address Temporal was not found
// at).
func TestInternalErrorsKeepTheirCause(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true})
	gone, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(gone.Close)
	var logs testenv.SyncBuffer
	srv := httptest.NewServer((&api.Server{Kube: s.Kube.Client, OSB: testenv.OSBCredentials, Admin: testenv.AdminCredentials,
		Temporal: gone, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}).AdminHandler())
	t.Cleanup(srv.Close)
	status, body, header := testenv.HTTP(http.MethodGet, srv.URL+"/admin/mass-updates", "", &testenv.AdminCredentials, nil)
	assert.Equal(t, http.StatusInternalServerError, status)
	id := header.Get("X-Broker-API-Request-Identity")
	assert.NotEmpty(t, id, "a request without an identity is given one")
	assert.JSONEq(t, `{"description": "listing the mass updates failed: an internal error; the broker's log has its cause under request identity `+id+`"}`, body)
	assert.Contains(t, logLine(t, &logs, id), "127.0.0.1:1", "the log has the cause, under that identity")

	// An OSB route's failure alike, under the platform's own identity: here
	// the API server cannot be reached.
	unreachable, err := ctrlclient.New(&rest.Config{Host: "https://127.0.0.1:1"}, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	osb := httptest.NewServer((&api.Server{Kube: unreachable, Namespace: "default", OSB: testenv.OSBCredentials,
		Temporal: gone, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}).Handler())
	t.Cleanup(osb.Close)
	status, body, header = testenv.HTTP(http.MethodGet, osb.URL+"/v2/service_instances/db-1", "", &testenv.OSBCredentials,
		map[string]string{"X-Broker-API-Version": "2.17", "X-Broker-API-Request-Identity": "platform-req-7"})
	assert.Equal(t, http.StatusInternalServerError, status, body)
	assert.Equal(t, "platform-req-7", header.Get("X-Broker-API-Request-Identity"))
	assert.JSONEq(t, `{"description": "reading instance \"db-1\" failed: an internal error; the broker's log has its cause under request identity platform-req-7"}`, body)
	assert.Contains(t, logLine(t, &logs, "platform-req-7"), "127.0.0.1:1", "the log has the cause")
}

// logLine is the log line of logs that names the request identity id.
func logLine(t *testing.T, logs *testenv.SyncBuffer, id string) string {
	t.Helper()
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, `"requestIdentity":"`+id+`"`) && strings.Contains(line, `"error"`) {
			return line
		}
	}
	t.Errorf("no error line of request %s in the log:\n%s", id, logs.String())
	return ""
}

// countingLists is a Temporal client that counts ListWorkflow calls and
// answers none running.
type countingLists struct {
	client.Client
	lists atomic.Int32
}

func (c *countingLists) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	c.lists.Add(1)
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

// TestMetricsScrapesShareOneRead: however many scrapes /metrics takes, the
// mass-update gauges ask Temporal once for a few seconds, not per scrape
// (an unauthenticated scraper could otherwise load Temporal at will).
func TestMetricsScrapesShareOneRead(t *testing.T) {
	lazy, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(lazy.Close)
	temporal := &countingLists{Client: lazy}
	srv := httptest.NewServer((&api.Server{OSB: testenv.OSBCredentials, Temporal: temporal,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).MetricsHandler())
	t.Cleanup(srv.Close)
	for range 50 {
		status, body, _ := testenv.HTTP(http.MethodGet, srv.URL+"/metrics", "", nil, nil)
		require.Equal(t, http.StatusOK, status, body)
	}
	assert.EqualValues(t, 1, temporal.lists.Load(), "50 scrapes, one list of the running mass updates")
}
