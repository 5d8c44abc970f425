package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// The seed's service and plan are registered once per test binary: IDs are
// unique across the cluster, as a platform expects of a catalog.
var (
	registerOnce sync.Once
	seedNS       string
)

// broker serves the API for the namespace that holds the seed's postgresql
// service and plan, registered once.
func broker(t *testing.T) *testenv.System {
	t.Helper()
	kube := testenv.Kubernetes(t)
	registerOnce.Do(func() {
		seedNS = kube.Namespace(t)
		for _, file := range []string{"003-sfservice.yaml", "003-sfplan-postgresql.yaml"} {
			raw, err := os.ReadFile("../crds/testdata/seeds/" + file)
			require.NoError(t, err)
			obj := testenv.Decode(t, string(raw))
			obj.SetNamespace(seedNS)
			require.NoError(t, kube.Client.Create(context.Background(), obj))
		}
	})
	return testenv.Start(t, testenv.Parts{API: true, Namespace: seedNS})
}

func TestAuthAndVersion(t *testing.T) {
	s := broker(t)
	v217 := map[string]string{"X-Broker-API-Version": "2.17"}
	wrong := api.Credentials{Username: testenv.OSBCredentials.Username, Password: "guess"}

	for _, tc := range []struct {
		name   string
		header map[string]string
		auth   *api.Credentials
		status int
		body   string
	}{
		{"no credentials", v217, nil, 401, `{"description":"missing or wrong credentials"}`},
		{"wrong password", v217, &wrong, 401, `{"description":"missing or wrong credentials"}`},
		{"no version header", nil, &testenv.OSBCredentials, 400, `{"description":"the X-Broker-API-Version header is missing"}`},
		{"a version that is not one", map[string]string{"X-Broker-API-Version": "latest"}, &testenv.OSBCredentials, 400, `{"description":"X-Broker-API-Version \"latest\" is not a version"}`},
		{"another major version", map[string]string{"X-Broker-API-Version": "3.0"}, &testenv.OSBCredentials, 412, `{"description":"X-Broker-API-Version \"3.0\" is not supported; this broker serves 2.x (up to 2.17)"}`},
		{"an older minor version", map[string]string{"X-Broker-API-Version": "2.13"}, &testenv.OSBCredentials, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, header := testenv.HTTP(http.MethodGet, s.URL+"/v2/catalog", "", tc.auth, tc.header)
			assert.Equal(t, tc.status, status)
			if tc.body != "" {
				assert.JSONEq(t, tc.body, body)
				assert.Equal(t, "application/json", header.Get("Content-Type"))
			}
			if tc.status == 401 {
				assert.Equal(t, `Basic realm="Quartermaster OSB"`, header.Get("WWW-Authenticate"))
			}
		})
	}

	_, _, header := testenv.HTTP(http.MethodGet, s.URL+"/v2/catalog", "", &testenv.OSBCredentials,
		map[string]string{"X-Broker-API-Version": "2.17", "X-Broker-API-Request-Identity": "req-42"})
	assert.Equal(t, "req-42", header.Get("X-Broker-API-Request-Identity"), "the request identity is echoed")
}

func TestCatalog(t *testing.T) {
	s := broker(t)
	status, body, _ := testenv.HTTP(http.MethodGet, s.URL+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
	require.Equal(t, http.StatusOK, status, body)

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

	// A change to a plan shows in the next call, without a restart. The
	// test changes a plan of its own: the seed's are shared.
	own := testenv.Start(t, testenv.Parts{API: true})
	own.Plan("edited", "", testenv.Templates("instant"))
	var plan osbv1alpha1.SFPlan
	require.NoError(t, own.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: own.Namespace, Name: "edited"}, &plan))
	base := plan.DeepCopy()
	plan.Spec.Description = "now with 40GB"
	plan.Spec.MaintenanceInfo = &osbv1alpha1.MaintenanceInfo{Version: "2.0.0", Description: "PostgreSQL 9.6.24"}
	require.NoError(t, own.Kube.Client.Patch(context.Background(), &plan, ctrlclient.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, body, _ := testenv.HTTP(http.MethodGet, own.URL+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
		var got struct {
			Services []struct {
				Plans []map[string]any `json:"plans"`
			} `json:"services"`
		}
		require.NoError(c, json.Unmarshal([]byte(body), &got))
		require.Len(c, got.Services, 1)
		require.Len(c, got.Services[0].Plans, 1)
		assert.Equal(c, "now with 40GB", got.Services[0].Plans[0]["description"])
		assert.Equal(c, map[string]any{"version": "2.0.0", "description": "PostgreSQL 9.6.24"}, got.Services[0].Plans[0]["maintenance_info"])
	}, 10*time.Second, 20*time.Millisecond)
}
