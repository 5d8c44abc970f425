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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// boundCredentials is the body of a bind, and of GET binding.
type boundCredentials struct {
	Credentials struct {
		User     string `json:"user"`
		Password string `json:"password"`
	} `json:"credentials"`
	Metadata struct {
		ExpiresAt   string `json:"expires_at"`
		RenewBefore string `json:"renew_before"`
	} `json:"metadata"`
	Parameters map[string]any `json:"parameters"`
}

// TestBindingRotation: a platform rotates a binding through the OSB API.
// The new binding keeps the predecessor's user with a new password, and
// its parameters, context and bind_resource; both logins work until the
// predecessor is unbound. Each rotation the rules do not allow is 400 and
// leaves nothing behind; kubectl users rotate with spec.predecessorBinding.
func TestBindingRotation(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	ctx := context.Background()
	rotating := s.Plan("rotating", "  bindingRotatable: true", testenv.Templates("rotating"))
	fixed := s.Plan("fixed", "", testenv.Templates("rotating"))

	// The catalog says which plan's bindings rotate.
	var cat struct {
		Services []struct {
			Plans []struct {
				ID        string `json:"id"`
				Rotatable *bool  `json:"binding_rotatable"`
			} `json:"plans"`
		} `json:"services"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.Expect(http.MethodGet, "/v2/catalog", "", http.StatusOK, "")), &cat))
	rotatable := map[string]*bool{}
	for _, p := range cat.Services[0].Plans {
		rotatable[p.ID] = p.Rotatable
	}
	require.NotNil(t, rotatable[rotating])
	assert.True(t, *rotatable[rotating])
	assert.Nil(t, rotatable[fixed], "binding_rotatable is left out where it is false")

	provision := func(id, plan string) {
		s.Expect(http.MethodPut, "/v2/service_instances/"+id, fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`,
			s.ServiceID, plan), http.StatusCreated, "")
	}
	provision("db", rotating)
	provision("other", rotating)
	provision("plain", fixed)
	bind := func(instance, id, plan, extra string, want int) (boundCredentials, string) {
		t.Helper()
		status, body, _ := s.Do(http.MethodPut, "/v2/service_instances/"+instance+"/service_bindings/"+id,
			fmt.Sprintf(`{"service_id": %q, "plan_id": %q%s}`, s.ServiceID, plan, extra), nil)
		require.Equal(t, want, status, "PUT binding %s: %s", id, body)
		var got boundCredentials
		if status < 300 {
			require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		}
		return got, body
	}
	login := func(binding string) (map[string]string, error) {
		var cm corev1.ConfigMap
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "db-login-" + binding}, &cm)
		return cm.Data, err
	}

	// 1. A binding, then its rotation, which gives only the predecessor.
	first, _ := bind("db", "b-1", rotating, `, "parameters": {"role": "rw"}, "context": {"platform": "cloudfoundry"}, "bind_resource": {"app_guid": "app-1"}`, http.StatusCreated)
	assert.Equal(t, "u-b-1", first.Credentials.User)
	require.NotEmpty(t, first.Credentials.Password)
	second, body := bind("db", "b-2", rotating, `, "predecessor_binding_id": "b-1"`, http.StatusCreated)
	assert.Equal(t, "u-b-1", second.Credentials.User, "the same user")
	assert.NotEmpty(t, second.Credentials.Password)
	assert.NotEqual(t, first.Credentials.Password, second.Credentials.Password, "a new password")
	assert.Equal(t, "2030-01-01T00:00:00Z", second.Metadata.ExpiresAt, "the platform learns when to rotate next")
	assert.Equal(t, "2029-12-01T00:00:00Z", second.Metadata.RenewBefore)
	assert.JSONEq(t, body, s.Expect(http.MethodPut, "/v2/service_instances/db/service_bindings/b-2",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "predecessor_binding_id": "b-1"}`, s.ServiceID, rotating), http.StatusOK, ""),
		"the same rotation again is 200 with the same binding")

	// What was recorded: the predecessor, and its parameters, context and
	// bind_resource, which the platform did not send again.
	var recorded osbv1alpha1.SFServiceBinding
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "b-2"}, &recorded))
	assert.Equal(t, "b-1", recorded.Spec.PredecessorBinding)
	require.NotNil(t, recorded.Spec.Parameters)
	assert.JSONEq(t, `{"role": "rw"}`, string(recorded.Spec.Parameters.Raw))
	require.NotNil(t, recorded.Spec.Context)
	assert.JSONEq(t, `{"platform": "cloudfoundry"}`, string(recorded.Spec.Context.Raw))
	require.NotNil(t, recorded.Spec.BindResource)
	assert.JSONEq(t, `{"app_guid": "app-1"}`, string(recorded.Spec.BindResource.Raw))
	got := boundCredentials{}
	require.NoError(t, json.Unmarshal([]byte(s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-2", "", http.StatusOK, "")), &got))
	assert.Equal(t, second.Credentials, got.Credentials)
	assert.Equal(t, second.Metadata, got.Metadata)
	assert.Equal(t, map[string]any{"role": "rw"}, got.Parameters)

	// Both logins work; the new one's templates saw the predecessor and
	// the keys of its credentials.
	old, err := login("b-1")
	require.NoError(t, err)
	assert.Equal(t, first.Credentials.Password, old["password"])
	rotated, err := login("b-2")
	require.NoError(t, err)
	assert.Equal(t, second.Credentials.Password, rotated["password"])
	assert.Equal(t, "u-b-1", rotated["user"])
	assert.Equal(t, "b-1", rotated["rotates"])
	assert.Equal(t, "password,user", rotated["predecessorKeys"])

	// 2. Refusals: 400 with what is wrong, and no binding recorded.
	bind("other", "o-1", rotating, "", http.StatusCreated)
	bind("plain", "p-1", fixed, "", http.StatusCreated)
	bind("db", "held", rotating, "", http.StatusCreated)
	hold(t, s, "held")
	for _, c := range []struct {
		instance, id, plan, predecessor, says string
	}{
		{"plain", "p-2", fixed, "p-1", `plan \"fixed\" does not allow binding rotation`},
		{"db", "b-3", rotating, "nobody", `predecessor binding \"nobody\" does not exist`},
		{"db", "b-4", rotating, "o-1", `predecessor binding \"o-1\" belongs to instance \"other\", not \"db\"`},
		{"db", "b-5", rotating, "held", `predecessor binding \"held\" is being unbound`},
		{"db", "b-6", rotating, "b-6", `binding \"b-6\" cannot be its own predecessor`},
	} {
		_, body := bind(c.instance, c.id, c.plan, fmt.Sprintf(`, "predecessor_binding_id": %q`, c.predecessor), http.StatusBadRequest)
		assert.Contains(t, body, c.says, c.id)
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: c.id}, &osbv1alpha1.SFServiceBinding{})
		assert.True(t, apierrors.IsNotFound(err), "a refused rotation %s leaves no binding: %v", c.id, err)
	}

	// 3. The platform unbinds the predecessor: only the new login is left,
	// and the rotation's retry is answered as before.
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/db/service_bindings/b-1?service_id=%s&plan_id=%s", s.ServiceID, rotating), "", http.StatusOK, `{}`)
	_, err = login("b-1")
	assert.True(t, apierrors.IsNotFound(err), "the predecessor's login is gone: %v", err)
	rotated, err = login("b-2")
	require.NoError(t, err)
	assert.Equal(t, second.Credentials.Password, rotated["password"])
	s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-1", "", http.StatusNotFound, "")
	assert.JSONEq(t, body, s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-2", "", http.StatusOK, ""))
	s.Expect(http.MethodPut, "/v2/service_instances/db/service_bindings/b-2",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "predecessor_binding_id": "b-1"}`, s.ServiceID, rotating), http.StatusOK, body)

	// 4. kubectl: a rotation by spec.predecessorBinding binds with the same
	// user; one the rules refuse fails, saying why; the field is immutable.
	kubectlBind := func(name, predecessor string) *osbv1alpha1.SFServiceBinding {
		b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: osbv1alpha1.SFServiceBindingSpec{ID: name, InstanceID: "db", ServiceID: s.ServiceID, PlanID: rotating, PredecessorBinding: predecessor}}
		require.NoError(t, s.Kube.Client.Create(ctx, b))
		return b
	}
	k := kubectlBind("k-1", "b-2")
	refused := kubectlBind("k-2", "b-1")
	for _, b := range []*osbv1alpha1.SFServiceBinding{k, refused} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b))
			assert.Contains(c, []osbv1alpha1.OperationState{osbv1alpha1.StateSucceeded, osbv1alpha1.StateFailed}, b.Status.State)
		}, 60*time.Second, 50*time.Millisecond, "binding %s ends", b.Name)
	}
	assert.Equal(t, osbv1alpha1.StateSucceeded, k.Status.State, k.Status.Description)
	var secret corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: k.Status.Response.SecretRef}, &secret))
	assert.Equal(t, "u-b-1", string(secret.Data["user"]), "a rotation of a rotation keeps the user")
	assert.Equal(t, osbv1alpha1.StateFailed, refused.Status.State)
	assert.Equal(t, `bind failed: predecessor binding "b-1" does not exist`, refused.Status.Description)
	_, err = login("k-2")
	assert.True(t, apierrors.IsNotFound(err), "a refused rotation applies nothing: %v", err)
	k.Spec.PredecessorBinding = "o-1"
	err = s.Kube.Client.Update(ctx, k)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "predecessorBinding is immutable")
}

// hold keeps a binding, once deleted, in deletion: a finalizer of the
// test's own outlasts the Unbind run's.
func hold(t *testing.T, s *testenv.System, name string) {
	t.Helper()
	ctx := context.Background()
	const finalizer = "test.quartermaster.io/hold"
	var b osbv1alpha1.SFServiceBinding
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &b))
	b.Finalizers = append(b.Finalizers, finalizer)
	require.NoError(t, s.Kube.Client.Update(ctx, &b))
	require.NoError(t, s.Kube.Client.Delete(ctx, &b))
	t.Cleanup(func() {
		var b osbv1alpha1.SFServiceBinding
		if s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &b) == nil {
			b.Finalizers = nil
			_ = s.Kube.Client.Update(context.Background(), &b)
		}
	})
}

// TestOSBBindingsRotateOnThePlansSchedule: a plan's bindingRotation is the
// policy of the bindings a platform makes: the bind answers with the
// credentials of the binding's first successor, and OSB's metadata says
// when to renew them (the next rotation) and when they expire (the end of
// its overlap), not what the plan's status template says; GET agrees.
func TestOSBBindingsRotateOnThePlansSchedule(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	plan := s.Plan("scheduled", "  bindingRotatable: true\n  bindingRotation: {every: 1h, keepFor: 10m}", testenv.Templates("rotating"))
	s.Expect(http.MethodPut, "/v2/service_instances/db", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`,
		s.ServiceID, plan), http.StatusCreated, "")
	before := time.Now().Truncate(time.Second)
	body := s.Expect(http.MethodPut, "/v2/service_instances/db/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, "")
	var got boundCredentials
	require.NoError(t, json.Unmarshal([]byte(body), &got), body)
	assert.Equal(t, "u-b-1-r1", got.Credentials.User, "the first successor's login")
	renew, err := time.Parse(time.RFC3339, got.Metadata.RenewBefore)
	require.NoError(t, err, body)
	expires, err := time.Parse(time.RFC3339, got.Metadata.ExpiresAt)
	require.NoError(t, err, body)
	assert.WithinDuration(t, before.Add(time.Hour), renew, time.Minute, "renew before the next rotation")
	assert.Equal(t, 10*time.Minute, expires.Sub(renew), "they expire when its overlap ends")
	assert.JSONEq(t, body, s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-1", "", http.StatusOK, ""))

	// A platform's binding whose ID is b-1's successor's name is a binding
	// of its own: its own login, and b-1's stays as it was.
	twin := s.Expect(http.MethodPut, "/v2/service_instances/db/service_bindings/b-1-r1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, "")
	var twinGot boundCredentials
	require.NoError(t, json.Unmarshal([]byte(twin), &twinGot), twin)
	assert.Equal(t, "u-"+api.BindingName("b-1-r1")+"-r1", twinGot.Credentials.User, "its own first successor's login")
	assert.NotEqual(t, got.Credentials.Password, twinGot.Credentials.Password)
	assert.JSONEq(t, body, s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-1", "", http.StatusOK, ""))
	assert.JSONEq(t, twin, s.Expect(http.MethodGet, "/v2/service_instances/db/service_bindings/b-1-r1", "", http.StatusOK, ""))
}
