package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestServiceFabrikFieldsAreHonoured: the fields Service Fabrik's CRDs
// spell otherwise, or that Quartermaster once lacked, mean what they mean
// there. A service's instanceRetrievable, bindingRetrievable and
// dashboardClient.redirectUri are served in the catalog; OSB's app_guid
// (in bind_resource, or the deprecated top-level field) is recorded as the
// binding's appGuid, and a rotation's successor inherits it; an instance's
// spec.metadata is served by GET where its status template reports none.
func TestServiceFabrikFieldsAreHonoured(t *testing.T) {
	ctx := context.Background()
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	plan := s.Plan("instant", "  bindingRotatable: true\n", testenv.Templates("instant"))
	patch := `{"spec": {"instancesRetrievable": false, "bindingsRetrievable": false, "instanceRetrievable": true, "bindingRetrievable": true,
		"dashboardClient": {"id": "dash", "secret": "dash-secret", "redirectUri": "https://dashboard.example.com/sf"}}}`
	svc := &osbv1alpha1.SFService{}
	svc.Name, svc.Namespace = "svc", s.Namespace
	require.NoError(t, s.Kube.Client.Patch(ctx, svc, ctrlclient.RawPatch(types.MergePatchType, []byte(patch))))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body, _ := testenv.HTTP(http.MethodGet, s.URL+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
		require.Equal(c, http.StatusOK, status, body)
		var catalog struct {
			Services []struct {
				ID                   string `json:"id"`
				InstancesRetrievable bool   `json:"instances_retrievable"`
				BindingsRetrievable  bool   `json:"bindings_retrievable"`
				DashboardClient      struct {
					RedirectURI string `json:"redirect_uri"`
				} `json:"dashboard_client"`
			} `json:"services"`
		}
		require.NoError(c, json.Unmarshal([]byte(body), &catalog))
		for _, served := range catalog.Services {
			if served.ID == s.ServiceID {
				assert.True(c, served.InstancesRetrievable, "instanceRetrievable is served as instances_retrievable")
				assert.True(c, served.BindingsRetrievable, "bindingRetrievable is served as bindings_retrievable")
				assert.Equal(c, "https://dashboard.example.com/sf", served.DashboardClient.RedirectURI, "redirectUri is served as redirect_uri")
				return
			}
		}
		assert.Fail(c, "the service is not in the catalog")
	}, 20*time.Second, 100*time.Millisecond)

	// spec.metadata, as Service Fabrik keeps it, is what GET serves.
	s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceInstance
metadata: {name: db, namespace: %s}
spec:
  serviceId: %s
  planId: %s
  metadata: {labels: {team: payments}, attributes: {costCenter: "4711"}}`, s.Namespace, s.ServiceID, plan))
	s.WaitInstance("db", "provisioned", testenv.Succeeded(1))
	s.Expect(http.MethodGet, "/v2/service_instances/db", "", http.StatusOK, fmt.Sprintf(
		`{"service_id": %q, "plan_id": %q, "metadata": {"labels": {"team": "payments"}, "attributes": {"costCenter": "4711"}}}`, s.ServiceID, plan))

	appGUID := func(binding string) string {
		var b osbv1alpha1.SFServiceBinding
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: binding}, &b))
		return b.Spec.AppGUID
	}
	bind := func(id, extra string) {
		t.Helper()
		s.Expect(http.MethodPut, "/v2/service_instances/db/service_bindings/"+id,
			fmt.Sprintf(`{"service_id": %q, "plan_id": %q%s}`, s.ServiceID, plan, extra), http.StatusCreated, "")
	}
	bind("in-bind-resource", `, "bind_resource": {"app_guid": "app-1"}`)
	assert.Equal(t, "app-1", appGUID("in-bind-resource"))
	bind("top-level", `, "app_guid": "app-2"`)
	assert.Equal(t, "app-2", appGUID("top-level"), "the deprecated top-level app_guid too")
	bind("successor", `, "predecessor_binding_id": "top-level"`)
	assert.Equal(t, "app-2", appGUID("successor"), "a rotation's successor is for the same app")
}
