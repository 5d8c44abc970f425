package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var creds = api.Credentials{Username: "platform", Password: "s3cr3t-pw"}

// The seed's service and plan are registered once per test binary: IDs are
// unique across the cluster, as a platform expects of a catalog.
var (
	registerOnce sync.Once
	seedNS       string
)

// broker serves the API against the shared API server, with the seed's
// postgresql service and plan registered.
func broker(t *testing.T) (*httptest.Server, *testenv.Cluster, string) {
	t.Helper()
	kube := testenv.Kubernetes(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	registerOnce.Do(func() {
		seedNS = kube.Namespace(t)
		for _, file := range []string{"003-sfservice.yaml", "003-sfplan-postgresql.yaml"} {
			raw, err := os.ReadFile("../crds/testdata/seeds/" + file)
			require.NoError(t, err)
			obj := &unstructured.Unstructured{}
			require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096).Decode(&obj.Object))
			obj.SetNamespace(seedNS)
			require.NoError(t, kube.Client.Create(ctx, obj))
		}
	})
	ns := seedNS
	cat := testenv.Catalog(t, kube.Config)
	srv := httptest.NewServer((&api.Server{Kube: kube.Client, Catalog: cat, Namespace: ns, OSB: creds}).Handler())
	t.Cleanup(srv.Close)
	return srv, kube, ns
}

func get(t *testing.T, url string, header map[string]string, auth *api.Credentials) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if auth != nil {
		req.SetBasicAuth(auth.Username, auth.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func TestAuthAndVersion(t *testing.T) {
	srv, _, _ := broker(t)
	v217 := map[string]string{"X-Broker-API-Version": "2.17"}
	wrong := api.Credentials{Username: creds.Username, Password: "guess"}

	for _, tc := range []struct {
		name   string
		header map[string]string
		auth   *api.Credentials
		status int
		body   string
	}{
		{"no credentials", v217, nil, 401, `{"description":"missing or wrong credentials"}`},
		{"wrong password", v217, &wrong, 401, `{"description":"missing or wrong credentials"}`},
		{"no version header", nil, &creds, 400, `{"description":"the X-Broker-API-Version header is missing"}`},
		{"a version that is not one", map[string]string{"X-Broker-API-Version": "latest"}, &creds, 400, `{"description":"X-Broker-API-Version \"latest\" is not a version"}`},
		{"another major version", map[string]string{"X-Broker-API-Version": "3.0"}, &creds, 412, `{"description":"X-Broker-API-Version \"3.0\" is not supported; this broker serves 2.x (up to 2.17)"}`},
		{"an older minor version", map[string]string{"X-Broker-API-Version": "2.13"}, &creds, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, srv.URL+"/v2/catalog", tc.header, tc.auth)
			assert.Equal(t, tc.status, resp.StatusCode)
			if tc.body != "" {
				assert.JSONEq(t, tc.body, string(body))
				assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			}
			if tc.status == 401 {
				assert.Equal(t, `Basic realm="Quartermaster OSB"`, resp.Header.Get("WWW-Authenticate"))
			}
		})
	}

	resp, _ := get(t, srv.URL+"/v2/catalog", map[string]string{"X-Broker-API-Version": "2.17", "X-Broker-API-Request-Identity": "req-42"}, &creds)
	assert.Equal(t, "req-42", resp.Header.Get("X-Broker-API-Request-Identity"), "the request identity is echoed")
}

func TestCatalog(t *testing.T) {
	srv, kube, ns := broker(t)
	header := map[string]string{"X-Broker-API-Version": "2.17"}
	resp, body := get(t, srv.URL+"/v2/catalog", header, &creds)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	assert.JSONEq(t, `{"services": [{
		"name": "postgresql",
		"id": "24731fb8-7b84-5f57-914f-c3d55d793dd4",
		"description": "Postgresql for internal development, testing, and documentation purposes of the Service Fabrik",
		"tags": ["postgresql"],
		"bindable": true,
		"instances_retrievable": true,
		"bindings_retrievable": true,
		"metadata": {"displayName": "PostgreSQL", "longDescription": "Postgresql for internal development, testing, and documentation purposes of the Service Fabrik",
			"providerDisplayName": "SAP SE", "documentationUrl": "https://sap.com/", "supportUrl": "https://sap.com/"},
		"dashboard_client": {"id": "postgresql-dashboard-client-id", "secret": "postgresql-dashboard-client-secret", "redirect_uri": "https://sap.com/"},
		"plan_updateable": true,
		"plans": [{
			"id": "39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88",
			"name": "v9.6-xxsmall",
			"description": "Postgresql service of size 1 CPU / 2GB RAM / 20GB Disk Storage running inside a k8s container ",
			"metadata": {"service-inventory-key": "SERVICE-TBD", "costs": [{"amount": {"usd": 0}, "unit": "MONTHLY"}], "bullets": ["1 CPU", "2 GB Memory", "20 GB Disk"]},
			"free": true,
			"bindable": true,
			"plan_updateable": true,
			"schemas": {"service_instance": {"create": {"parameters": {
				"$schema": "http://json-schema.org/draft-06/schema#", "title": "createServiceInstance", "type": "object",
				"additionalProperties": false, "properties": {"foo": {"type": "string", "description": "some description for foo field"}},
				"required": ["foo"]}}}}
		}]
	}]}`, string(body))
	for _, internal := range []string{"templates", "context", "manager", "namePrefix"} {
		assert.NotContains(t, string(body), internal, "Quartermaster-only fields stay out of the catalog")
	}

	// A change to a plan shows in the next call, without a restart.
	var plan osbv1alpha1.SFPlan
	require.NoError(t, kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88"}, &plan))
	base := plan.DeepCopy()
	plan.Spec.Description = "now with 40GB"
	plan.Spec.MaintenanceInfo = &osbv1alpha1.MaintenanceInfo{Version: "2.0.0", Description: "PostgreSQL 9.6.24"}
	require.NoError(t, kube.Client.Patch(context.Background(), &plan, ctrlclient.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, body := get(t, srv.URL+"/v2/catalog", header, &creds)
		var got struct {
			Services []struct {
				Plans []map[string]any `json:"plans"`
			} `json:"services"`
		}
		require.NoError(c, json.Unmarshal(body, &got))
		require.Len(c, got.Services, 1)
		assert.Equal(c, "now with 40GB", got.Services[0].Plans[0]["description"])
		assert.Equal(c, map[string]any{"version": "2.0.0", "description": "PostgreSQL 9.6.24"}, got.Services[0].Plans[0]["maintenance_info"])
	}, 10*time.Second, 20*time.Millisecond)
}
