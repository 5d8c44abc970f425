package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestOSBLifecycle walks an instance through the OSB API as a platform
// does, with the real worker and dev server behind it: catalog, async
// provision, last_operation, GET, bind, GET binding, unbind, plan update,
// deprovision, and last_operation 410 at the end. Along the way it checks
// the answers to repeated, conflicting and concurrent requests.
func TestOSBLifecycle(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	small := s.Plan("small", "  manager: {async: true}", testenv.Templates("gated"))
	large := s.Plan("large", "  manager: {async: true}\n  maintenance_info: {version: 2.1.0}", testenv.Templates("gated"))
	inst := "/v2/service_instances/db-1"
	provision := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space",
		"context": {"platform": "cloudfoundry"}, "parameters": {"size": "medium"}}`, s.ServiceID, small)

	// 1. The catalog.
	body := s.Expect(http.MethodGet, "/v2/catalog", "", http.StatusOK, "")
	var cat struct {
		Services []struct {
			ID    string `json:"id"`
			Plans []struct {
				ID string `json:"id"`
			} `json:"plans"`
		} `json:"services"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &cat))
	require.Len(t, cat.Services, 1, "the broker's namespace holds one service")
	assert.Equal(t, s.ServiceID, cat.Services[0].ID)
	assert.Len(t, cat.Services[0].Plans, 2)

	// 2. Provision, asynchronously; the request is recorded as an instance.
	status, body, _ := s.Do(http.MethodPut, inst+"?accepts_incomplete=true", provision,
		map[string]string{"X-Broker-API-Originating-Identity": identity("cloudfoundry", `{"user_id": "alice"}`)})
	require.Equal(t, http.StatusAccepted, status, body)
	assert.JSONEq(t, `{"operation": "provision"}`, body)
	recorded, err := s.GetInstance("db-1")
	require.NoError(t, err)
	assert.Equal(t, "db-1", recorded.Spec.InstanceID)
	assert.Equal(t, small, recorded.Spec.PlanID)
	assert.JSONEq(t, `{"size": "medium"}`, string(recorded.Spec.Parameters.Raw))
	assert.JSONEq(t, `{"platform": "cloudfoundry", "value": {"user_id": "alice"}}`,
		recorded.Annotations[api.OriginatingIdentityAnnotation])

	// While it runs: the same PUT is 202 with the same operation, another
	// is 409, GET is 404, and every other operation is a ConcurrencyError.
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", provision, http.StatusAccepted, `{"operation": "provision"}`)
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, small),
		http.StatusConflict, `{"description": "instance \"db-1\" already exists with different attributes"}`)
	s.Expect(http.MethodGet, inst, "", http.StatusNotFound, "")
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, large),
		http.StatusUnprocessableEntity, "")
	status, body, _ = s.Do(http.MethodDelete, inst+fmt.Sprintf("?accepts_incomplete=true&service_id=%s&plan_id=%s", s.ServiceID, small), "", nil)
	assert.Equal(t, http.StatusUnprocessableEntity, status)
	assert.Contains(t, body, `"error":"ConcurrencyError"`)
	s.Expect(http.MethodPut, inst+"/service_bindings/app-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, small),
		http.StatusUnprocessableEntity, `{"error": "ConcurrencyError", "description": "instance \"db-1\" is being provisioned"}`)
	waitInProgress(t, s, inst+"/last_operation?operation=provision", "waiting for the gate")

	// 3. Poll last_operation to succeeded.
	s.OpenGate("db-1", "gate")
	assert.Equal(t, map[string]any{"state": "succeeded", "description": "ready"},
		s.PollLastOperation(inst+"/last_operation?operation=provision"))

	// 4. GET the instance; the identical PUT is now 200.
	s.Expect(http.MethodGet, inst, "", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q,
		"dashboard_url": "https://dashboard.example/db-1", "parameters": {"size": "medium"}}`, s.ServiceID, small))
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", provision, http.StatusOK, `{"dashboard_url": "https://dashboard.example/db-1"}`)
	var db corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db-1-db"}, &db))
	assert.Equal(t, map[string]string{"size": "medium", "plan": "small"}, db.Data)

	// 5. Bind (synchronous for this plan) and get the credentials, with
	// their JSON types.
	binding := inst + "/service_bindings/app-1"
	bind := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "bind_resource": {"app_guid": "app-guid-1"}}`, s.ServiceID, small)
	wantCreds := `{"credentials": {"uri": "db://db-1", "port": 5432, "hosts": ["a", "b"]}}`
	s.Expect(http.MethodPut, binding, bind, http.StatusCreated, wantCreds)
	s.Expect(http.MethodPut, binding, bind, http.StatusOK, wantCreds)
	s.Expect(http.MethodPut, binding, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, small), http.StatusConflict, "")
	var bindCM corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app-1-bind"}, &bindCM))
	assert.Equal(t, "app-guid-1", bindCM.Data["app"], "the bind template saw bind_resource")

	// 6. GET the binding and its last operation.
	s.Expect(http.MethodGet, binding, "", http.StatusOK, wantCreds)
	s.ExpectSoon(binding+"/last_operation?operation=bind", http.StatusOK, `{"state": "succeeded"}`)

	// 7. Unbind; the binding is gone.
	unbindQuery := fmt.Sprintf("?service_id=%s&plan_id=%s", s.ServiceID, small)
	s.Expect(http.MethodDelete, binding+unbindQuery, "", http.StatusOK, `{}`)
	s.Expect(http.MethodGet, binding, "", http.StatusNotFound, "")
	s.Expect(http.MethodDelete, binding+unbindQuery, "", http.StatusGone, `{}`)
	s.ExpectSoon(binding+"/last_operation?operation=unbind", http.StatusGone, `{}`)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(context.Background(),
		ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app-1-bind"}, &bindCM)), "unbind removed what bind applied")

	// 8. Update the plan; a maintenance_info the plan does not offer is refused.
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "maintenance_info": {"version": "9.9.9"}}`, s.ServiceID, large),
		http.StatusUnprocessableEntity, `{"error": "MaintenanceInfoConflict",
			"description": "maintenance_info.version \"9.9.9\" does not match the catalog's for plan \"large\" (2.1.0)"}`)
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "maintenance_info": {"version": "2.1.0"}, "previous_values": {"plan_id": %q}}`, s.ServiceID, large, small),
		http.StatusAccepted, `{"operation": "update-2", "dashboard_url": "https://dashboard.example/db-1"}`)
	// While the update runs, GET and another update are ConcurrencyErrors.
	waitInProgress(t, s, inst+"/last_operation?operation=update-2", "waiting for the update gate")
	s.Expect(http.MethodGet, inst, "", http.StatusUnprocessableEntity,
		`{"error": "ConcurrencyError", "description": "instance \"db-1\" is busy: waiting for the update gate"}`)
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "parameters": {"size": "large"}}`, s.ServiceID),
		http.StatusUnprocessableEntity, `{"error": "ConcurrencyError", "description": "instance \"db-1\" is busy: waiting for the update gate"}`)
	// The same update again, as a platform retries after a lost reply, is
	// that update: 202 with its operation.
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "maintenance_info": {"version": "2.1.0"}, "previous_values": {"plan_id": %q}}`, s.ServiceID, large, small),
		http.StatusAccepted, `{"operation": "update-2", "dashboard_url": "https://dashboard.example/db-1"}`)
	s.OpenGate("db-1", "update-gate")
	assert.Equal(t, map[string]any{"state": "succeeded", "description": "now large"},
		s.PollLastOperation(inst+"/last_operation?operation=update-2"))
	s.Expect(http.MethodGet, inst, "", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q,
		"dashboard_url": "https://dashboard.example/db-1", "parameters": {"size": "medium"}, "maintenance_info": {"version": "2.1.0"}}`, s.ServiceID, large))
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db-1-db"}, &db))
	assert.Equal(t, "large", db.Data["plan"], "the update re-rendered the provision template")
	s.Expect(http.MethodGet, inst+"/last_operation?operation=provision", "", http.StatusBadRequest,
		`{"description": "operation \"provision\" is not the last operation of instance \"db-1\" (the last one is \"update-2\")"}`)

	// A failed update: the instance stays usable with what it ran before,
	// and the same update would fail again.
	s.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "parameters": {"size": "broken"}}`, s.ServiceID),
		http.StatusAccepted, `{"operation": "update-3", "dashboard_url": "https://dashboard.example/db-1"}`)
	lo := s.PollLastOperation(inst + "/last_operation?operation=update-3")
	assert.Equal(t, "failed", lo["state"])
	assert.Equal(t, true, lo["instance_usable"])
	assert.Equal(t, false, lo["update_repeatable"])
	assert.Contains(t, lo["description"], "update failed: provision template: template: provision:1:")
	assert.Contains(t, lo["description"], "size broken is not supported")
	s.Expect(http.MethodGet, inst, "", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q,
		"dashboard_url": "https://dashboard.example/db-1", "parameters": {"size": "medium"}, "maintenance_info": {"version": "2.1.0"}}`, s.ServiceID, large))

	// 9. Deprovision.
	deprovision := inst + fmt.Sprintf("?accepts_incomplete=true&service_id=%s&plan_id=%s", s.ServiceID, large)
	s.Expect(http.MethodDelete, deprovision, "", http.StatusAccepted, `{"operation": "deprovision"}`)

	// 10. last_operation ends in 410 Gone; so does a second DELETE.
	s.ExpectSoon(inst+"/last_operation?operation=deprovision", http.StatusGone, `{}`)
	s.Expect(http.MethodDelete, deprovision, "", http.StatusGone, `{}`)
	_, err = s.GetInstance("db-1")
	assert.True(t, apierrors.IsNotFound(err), "the instance is gone: %v", err)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(context.Background(),
		ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db-1-db"}, &db)), "and what it applied")
}

// TestOSBSynchronousPlan: a plan without manager.async answers when the
// workflow is done: 201 for provision, 200 for deprovision, with no polling.
// When it cannot finish within the timeout it answers 202 to a client that
// accepts it, and 500 to one that does not.
func TestOSBSynchronousPlan(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	instant := s.Plan("instant", "", testenv.Templates("instant"))
	gated := s.Plan("gated", "", testenv.Templates("gated"))

	s.Expect(http.MethodPut, "/v2/service_instances/sync-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, instant),
		http.StatusCreated, `{}`)
	s.Expect(http.MethodGet, "/v2/service_instances/sync-1", "", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, instant))
	s.Expect(http.MethodPut, "/v2/service_instances/sync-1/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, instant),
		http.StatusCreated, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/sync-1/service_bindings/b-1?service_id=%s&plan_id=%s", s.ServiceID, instant), "",
		http.StatusOK, `{}`)
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/sync-1?service_id=%s&plan_id=%s", s.ServiceID, instant), "",
		http.StatusOK, `{}`)
	_, err := s.GetInstance("sync-1")
	assert.True(t, apierrors.IsNotFound(err), "a synchronous deprovision answers once the instance is gone")

	// A broker with a short timeout, for the step that needs one only.
	short := testenv.Start(t, testenv.Parts{API: true, Namespace: s.Namespace, ServiceID: s.ServiceID, SyncTimeout: 3 * time.Second})
	short.Expect(http.MethodPut, "/v2/service_instances/slow-1?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, gated),
		http.StatusAccepted, `{"operation": "provision"}`)
	status, body, _ := short.Do(http.MethodPut, "/v2/service_instances/slow-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, gated), nil)
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Contains(t, body, `provision of instance \"slow-1\" did not finish within 3s`)
	s.OpenGate("slow-1", "gate")
	assert.Equal(t, "succeeded", s.PollLastOperation("/v2/service_instances/slow-1/last_operation")["state"])
}

// TestOSBParallelDuplicatePUTs: 50 identical PUTs at once for one instance
// ID make one SFServiceInstance and one workflow, and every reply agrees.
func TestOSBParallelDuplicatePUTs(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("gated", "  manager: {async: true}", testenv.Templates("gated"))
	body := fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space", "parameters": {"size": "large"}}`, s.ServiceID, plan)

	type reply struct {
		status int
		body   string
	}
	replies := make([]reply, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range replies {
		wg.Go(func() {
			<-start
			status, b, _ := s.Request(http.MethodPut, "/v2/service_instances/dup-1?accepts_incomplete=true", body, nil)
			replies[i] = reply{status, b}
		})
	}
	close(start)
	wg.Wait()
	for i, r := range replies {
		// The gate is closed: the provision runs, and every PUT is told so.
		assert.Equal(t, http.StatusAccepted, r.status, "reply %d: %s", i, r.body)
		assert.JSONEq(t, `{"operation": "provision"}`, r.body, "reply %d", i)
	}
	assert.Equal(t, 1, s.CountInstances(), "one SFServiceInstance")

	s.OpenGate("dup-1", "gate")
	assert.Equal(t, "succeeded", s.PollLastOperation("/v2/service_instances/dup-1/last_operation?operation=provision")["state"])
	workflowID := "sfserviceinstance/" + s.Namespace + "/dup-1"
	s.ClosedRun(workflowID, "Provision")
	assert.Equal(t, 1, s.Runs(t, workflowID), "one workflow run")
	inst, err := s.GetInstance("dup-1")
	require.NoError(t, err)
	assert.Equal(t, osbv1alpha1.StateSucceeded, inst.Status.State)
}

// TestOSBBindTimeout: a synchronous bind that takes longer than
// --bind-timeout is answered 202 to a client that accepts it, and its
// last_operation follows it to the end.
func TestOSBBindTimeout(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true, BindTimeout: 2 * time.Second})
	plan := s.Plan("slow-bind", "", testenv.Templates("gated-binding"))
	inst := "/v2/service_instances/sb-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan), http.StatusCreated, `{}`)

	binding := inst + "/service_bindings/b-1"
	bind := fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan)
	began := time.Now()
	s.Expect(http.MethodPut, binding+"?accepts_incomplete=true", bind, http.StatusAccepted, `{"operation": "bind"}`)
	assert.GreaterOrEqual(t, time.Since(began), 2*time.Second, "the broker waited for the bind up to the timeout")
	// In progress: queued still, on a loaded machine, or begun.
	status, body, _ := s.Do(http.MethodGet, binding+"/last_operation?operation=bind", "", nil)
	assert.Equal(t, http.StatusOK, status, body)
	var lo map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &lo), body)
	assert.Equal(t, "in progress", lo["state"], body)
	assert.Contains(t, []any{"bind is queued", "bind in progress"}, lo["description"], body)

	s.OpenGate("sb-1", "bind-gate")
	assert.Equal(t, "succeeded", s.PollLastOperation(binding + "/last_operation?operation=bind")["state"])
	s.Expect(http.MethodPut, binding, bind, http.StatusOK, `{"credentials": {"user": "u"}}`)
}

// waitInProgress waits until a last_operation poll answers "in progress"
// with description, and Retry-After.
func waitInProgress(t *testing.T, s *testenv.System, path, description string) {
	t.Helper()
	want := fmt.Sprintf(`{"state":"in progress","description":%q}`, description)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body, header := testenv.HTTP(http.MethodGet, s.URL+path, "", &testenv.OSBCredentials, testenv.OSBHeader)
		assert.Equal(c, http.StatusOK, status)
		assert.Equal(c, "2", header.Get("Retry-After"))
		assert.Equal(c, want, body)
	}, 30*time.Second, 50*time.Millisecond, "%s shows %q", path, description)
}

// TestOSBDeleteRecordsWhoAsked: the originating identity of a DELETE is
// recorded as an Event on the resource, which `kubectl describe` shows.
func TestOSBDeleteRecordsWhoAsked(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("async", "  manager: {async: true}", testenv.Templates("instant"))
	inst := "/v2/service_instances/who-1"
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusAccepted, `{"operation": "provision"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(inst + "/last_operation")["state"])
	status, body, _ := s.Do(http.MethodDelete, inst+fmt.Sprintf("?accepts_incomplete=true&service_id=%s&plan_id=%s", s.ServiceID, plan), "",
		map[string]string{"X-Broker-API-Originating-Identity": identity("cloudfoundry", `{"user_id": "bob"}`)})
	require.Equal(t, http.StatusAccepted, status, body)

	var events corev1.EventList
	require.NoError(t, s.Kube.Client.List(context.Background(), &events, ctrlclient.InNamespace(s.Namespace)))
	var found []corev1.Event
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind == "SFServiceInstance" && ev.InvolvedObject.Name == "who-1" {
			found = append(found, ev)
		}
	}
	require.Len(t, found, 1)
	assert.Equal(t, "RemovalRequested", found[0].Reason)
	assert.Equal(t, "osb.servicefabrik.io/v1alpha1", found[0].InvolvedObject.APIVersion)
	assert.Equal(t, `removal requested through the OSB API by {"platform":"cloudfoundry","value":{"user_id":"bob"}}`, found[0].Message)
}

// TestOSBBindingOfAGoneInstance: a binding whose instance is gone answers
// GET with 404, never with the credentials it had.
func TestOSBBindingOfAGoneInstance(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	inst := "/v2/service_instances/gone-1"
	binding := inst + "/service_bindings/b-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{}`)
	s.Expect(http.MethodPut, binding, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan), http.StatusCreated, `{"credentials": {"user": "u"}}`)
	s.Expect(http.MethodGet, binding, "", http.StatusOK, `{"credentials": {"user": "u"}}`)

	// A kubectl user removes the instance under the binding by force: its
	// finalizer stripped, no deprovision runs, and the binding stays.
	got, err := s.GetInstance("gone-1")
	require.NoError(t, err)
	base := got.DeepCopy()
	got.Finalizers = nil
	require.NoError(t, s.Kube.Client.Patch(context.Background(), got, ctrlclient.MergeFrom(base)))
	require.NoError(t, s.Kube.Client.Delete(context.Background(), got))
	s.WaitGone(got)
	var b osbv1alpha1.SFServiceBinding
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "b-1"}, &b))
	require.Nil(t, b.DeletionTimestamp, "the binding is still there")
	s.Expect(http.MethodGet, binding, "", http.StatusNotFound, `{"description": "binding \"b-1\" is of instance \"gone-1\", which is deprovisioned"}`)
}

// TestOSBDeprovisionWithBindings: a DELETE of an instance that still has
// bindings unbinds them first; the synchronous plan answers once all of
// it is gone, and the bindings are then unknown.
func TestOSBDeprovisionWithBindings(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	inst := "/v2/service_instances/owner-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{}`)
	for _, b := range []string{"b-1", "b-2"} {
		s.Expect(http.MethodPut, inst+"/service_bindings/"+b, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
			http.StatusCreated, `{"credentials": {"user": "u"}}`)
	}

	s.Expect(http.MethodDelete, inst+fmt.Sprintf("?service_id=%s&plan_id=%s", s.ServiceID, plan), "", http.StatusOK, `{}`)
	s.ExpectSoon(inst+"/last_operation?operation=deprovision", http.StatusGone, `{}`)
	for _, b := range []string{"b-1", "b-2"} {
		s.Expect(http.MethodGet, inst+"/service_bindings/"+b, "", http.StatusNotFound, "")
		_, err := s.GetInstance("owner-1")
		assert.True(t, apierrors.IsNotFound(err))
	}
	var bindings osbv1alpha1.SFServiceBindingList
	require.NoError(t, s.Kube.Client.List(context.Background(), &bindings, ctrlclient.InNamespace(s.Namespace)))
	assert.Empty(t, bindings.Items, "no binding is left behind")
}

// TestOSBBindResponseFields: the 2.17 fields of a bind response, from the
// plan's status template, come back from the bind and from GET of the
// binding, with the binding's parameters.
func TestOSBBindResponseFields(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("full-bind", "", `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-db}
  - action: status
    type: gotemplate
    content: |
      provision: {state: succeeded}
      bind:
        state: succeeded
        response:
          credentials: {user: u}
          endpoints:
          - {host: db.{{ .instance.metadata.namespace }}.svc, ports: ["5432"], protocol: tcp}
          volume_mounts:
          - {driver: nfs, container_dir: /data, mode: rw, device_type: shared, device: {volume_id: {{ .binding.metadata.name }}}}
          syslog_drain_url: syslog://logs.example:514
          route_service_url: https://route.example
          metadata: {expires_at: "2027-01-01T00:00:00Z", renew_before: "2026-12-01T00:00:00Z"}
`)
	inst := "/v2/service_instances/full-1"
	s.Expect(http.MethodPut, inst, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusCreated, `{}`)
	want := fmt.Sprintf(`{
		"credentials": {"user": "u"},
		"endpoints": [{"host": "db.%s.svc", "ports": ["5432"], "protocol": "tcp"}],
		"volume_mounts": [{"driver": "nfs", "container_dir": "/data", "mode": "rw", "device_type": "shared", "device": {"volume_id": "b-1"}}],
		"syslog_drain_url": "syslog://logs.example:514",
		"route_service_url": "https://route.example",
		"metadata": {"expires_at": "2027-01-01T00:00:00Z", "renew_before": "2026-12-01T00:00:00Z"}`, s.Namespace)
	binding := inst + "/service_bindings/b-1"
	s.Expect(http.MethodPut, binding, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "parameters": {"role": "reader"}}`, s.ServiceID, plan),
		http.StatusCreated, want+`, "parameters": {"role": "reader"}}`)
	s.Expect(http.MethodGet, binding, "", http.StatusOK, want+`, "parameters": {"role": "reader"}}`)
}

// TestOSBRemovalsAfterThePlanLeftTheCatalog: a binding and an instance
// whose plan has since been deleted are answered, not refused or crashed
// on: as synchronous removals (no plan says otherwise), which fail naming
// the plan that is missing.
func TestOSBRemovalsAfterThePlanLeftTheCatalog(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("leaving", "  manager: {async: true, asyncBinding: true}\n", testenv.Templates("instant"))
	inst := "/v2/service_instances/orphan-1"
	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, plan),
		http.StatusAccepted, `{"operation": "provision"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(inst + "/last_operation")["state"])
	s.Expect(http.MethodPut, inst+"/service_bindings/b-1?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusAccepted, `{"operation": "bind"}`)
	assert.Equal(t, "succeeded", s.PollLastOperation(inst + "/service_bindings/b-1/last_operation")["state"])

	require.NoError(t, s.Kube.Client.DeleteAllOf(context.Background(), &osbv1alpha1.SFPlan{}, ctrlclient.InNamespace(s.Namespace)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body, _ := s.Request(http.MethodGet, "/v2/catalog", "", nil)
		assert.Equal(c, http.StatusOK, status)
		assert.NotContains(c, body, plan)
	}, 30*time.Second, 50*time.Millisecond, "the plan leaves the catalog")

	// Answered without accepts_incomplete, as synchronous removals are;
	// they fail saying why, and the resources stay until the plan is back.
	s.Expect(http.MethodDelete, fmt.Sprintf("%s/service_bindings/b-1?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "",
		http.StatusInternalServerError, fmt.Sprintf(`{"description": "unbind failed: unknown plan \"%s\": no SFPlan has this spec.id"}`, plan))
	s.Expect(http.MethodDelete, fmt.Sprintf("%s?service_id=%s&plan_id=%s", inst, s.ServiceID, plan), "",
		http.StatusInternalServerError, fmt.Sprintf(`{"description": "deprovision failed: unknown plan \"%s\": no SFPlan has this spec.id"}`, plan))
}
