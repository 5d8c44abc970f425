package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// osbSystem is Quartermaster as a platform meets it: the OSB API in front
// of the real API server and, when started with a worker, the watcher and
// a worker on the dev server. Each test has its own namespace, which is the
// broker's namespace: its catalog holds that test's service and plans only.
type osbSystem struct {
	t      *testing.T
	kube   *testenv.Cluster
	tc     client.Client
	ns     string
	url    string
	server *api.Server
	svc    string // the OSB service_id of the test's service
}

// gatedTemplates provision a ConfigMap and report success only once a
// "gate" ConfigMap exists (an "update-gate" for updates), so that a test can
// look at an operation in progress; the size "broken" does not render. A
// binding's credentials hold a string, a number and a list.
const gatedTemplates = `
  - action: provision
    type: gotemplate
    content: |
      {{- if eq "broken" (dig "size" "" (.instance.spec.parameters | default dict)) }}{{ fail "size broken is not supported" }}{{ end }}
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .instance.metadata.name }}-db
      data:
        size: {{ dig "size" "small" (.instance.spec.parameters | default dict) | quote }}
        plan: {{ .plan.spec.name | quote }}
  - action: bind
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .binding.metadata.name }}-bind
      data:
        app: {{ dig "app_guid" "none" (.binding.spec.bindResource | default dict) | quote }}
  - action: sources
    type: gotemplate
    content: |
      gate:
        apiVersion: v1
        kind: ConfigMap
        name: {{ .instance.metadata.name }}-gate
      updategate:
        apiVersion: v1
        kind: ConfigMap
        name: {{ .instance.metadata.name }}-update-gate
  - action: status
    type: gotemplate
    content: |
      provision:
        state: {{ if .gate }}succeeded{{ else }}in progress{{ end }}
        description: {{ if .gate }}ready{{ else }}waiting for the gate{{ end }}
        dashboardUrl: https://dashboard.example/{{ .instance.metadata.name }}
      update:
        state: {{ if .updategate }}succeeded{{ else }}in progress{{ end }}
        description: {{ if .updategate }}now {{ .plan.spec.name }}{{ else }}waiting for the update gate{{ end }}
      bind:
        state: succeeded
        response:
          credentials:
            uri: db://{{ .instance.metadata.name }}
            port: 5432
            hosts: [a, b]
`

// instantTemplates succeed as soon as they are applied.
const instantTemplates = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .instance.metadata.name }}-db
      data: {}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded, description: ready}
      bind:
        state: succeeded
        response: {credentials: {user: u}}
`

// startOSB serves the OSB API for a new namespace with its own service;
// withWorker adds the watcher and a worker.
func startOSB(t *testing.T, withWorker bool) *osbSystem {
	t.Helper()
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	s := &osbSystem{t: t, kube: kube, ns: ns, svc: ns + "-svc"}
	s.create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {name: svc, namespace: %s}
spec:
  name: %s
  id: %s
  description: a service of the test
  bindable: true
  instancesRetrievable: true
  bindingsRetrievable: true
  planUpdatable: true`, ns, ns, s.svc))

	cat := testenv.Catalog(t, kube.Config)
	s.server = &api.Server{Kube: kube.Client, Catalog: cat, Namespace: ns, OSB: creds, Admin: adminCreds,
		SyncTimeout: 20 * time.Second, BindTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	srv := httptest.NewServer(s.server.Handler())
	t.Cleanup(srv.Close)
	s.url = srv.URL

	if withWorker {
		s.tc = testenv.Temporal(t)
		testenv.Quartermaster(t, kube.Config, s.tc, cat, starter.WatcherOptions{})
	}
	return s
}

var adminCreds = api.Credentials{Username: "operator", Password: "admin-pw"}

// plan registers a plan of the test's service and waits until the catalog
// serves it; extra is YAML added to its spec.
func (s *osbSystem) plan(name, extra, templates string) string {
	s.t.Helper()
	id := s.ns + "-" + name
	s.create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: %s, namespace: %s}
spec:
  name: %s
  id: %s
  description: a plan of the test
  serviceId: %s
  maximum_polling_duration: 120
%s
  templates:
%s`, name, s.ns, name, id, s.svc, extra, templates))
	require.Eventually(s.t, func() bool {
		status, body, _ := s.do(http.MethodGet, "/v2/catalog", "", nil)
		return status == http.StatusOK && strings.Contains(body, `"id":"`+id+`"`)
	}, 10*time.Second, 20*time.Millisecond, "the catalog serves plan %s", name)
	return id
}

func (s *osbSystem) create(manifest string) {
	s.t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(s.t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&obj.Object))
	require.NoError(s.t, s.kube.Client.Create(context.Background(), obj))
}

// openGate lets the gated provision (gate "gate") or update (gate
// "update-gate") of the instance named name finish.
func (s *osbSystem) openGate(name, gate string) {
	s.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + gate, Namespace: s.ns}}
	require.NoError(s.t, s.kube.Client.Create(context.Background(), cm))
}

// do sends an OSB request with the platform's credentials and version
// header, and returns the status, the body and the response headers.
func (s *osbSystem) do(method, path, body string, header map[string]string) (int, string, http.Header) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	require.NoError(s.t, err)
	req.SetBasicAuth(creds.Username, creds.Password)
	req.Header.Set("X-Broker-API-Version", "2.17")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, string(bytes.TrimSpace(raw)), resp.Header
}

// expect sends a request and checks its status and, unless wantBody is
// empty, its JSON body.
func (s *osbSystem) expect(method, path, body string, wantStatus int, wantBody string) string {
	s.t.Helper()
	status, got, _ := s.do(method, path, body, nil)
	assert.Equal(s.t, wantStatus, status, "%s %s: %s", method, path, got)
	if wantBody != "" && json.Valid([]byte(got)) {
		assert.JSONEq(s.t, wantBody, got, "%s %s", method, path)
	} else if wantBody != "" {
		s.t.Errorf("%s %s: the body is not JSON: %q", method, path, got)
	}
	return got
}

// pollLastOperation polls path until the state is no longer in progress
// and returns the final body.
func (s *osbSystem) pollLastOperation(path string) map[string]any {
	s.t.Helper()
	var last map[string]any
	require.Eventually(s.t, func() bool {
		status, body, _ := s.do(http.MethodGet, path, "", nil)
		require.Equal(s.t, http.StatusOK, status, body)
		last = nil
		require.NoError(s.t, json.Unmarshal([]byte(body), &last))
		return last["state"] != "in progress"
	}, 60*time.Second, 50*time.Millisecond, "%s ends", path)
	return last
}

func (s *osbSystem) instance(name string) (*osbv1alpha1.SFServiceInstance, error) {
	var inst osbv1alpha1.SFServiceInstance
	err := s.kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.ns, Name: name}, &inst)
	return &inst, err
}

// countInstances counts the SFServiceInstances of the test's namespace.
func (s *osbSystem) countInstances() int {
	s.t.Helper()
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(s.t, s.kube.Client.List(context.Background(), &list, ctrlclient.InNamespace(s.ns)))
	return len(list.Items)
}

// runs counts the workflow runs stored under a workflow ID.
func (s *osbSystem) runs(workflowID string) int {
	s.t.Helper()
	resp, err := s.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", workflowID),
	})
	require.NoError(s.t, err)
	return len(resp.Executions)
}

// identity is an X-Broker-API-Originating-Identity header.
func identity(platform, value string) string {
	return platform + " " + base64.StdEncoding.EncodeToString([]byte(value))
}
