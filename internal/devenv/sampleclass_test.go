package devenv_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/devenv"
)

// The sample key-value-store service's IDs (deploy/samples).
const (
	keyValueStoreService = "3d7c2b9a-8f1e-4b6d-9c3a-5e2f1a0b7c42"
	keyValueStorePlan    = "8a1e4c6f-2b3d-4e5f-9a7b-1c2d3e4f5a61"
)

// keyValueStoresAreClaimable is the README's tour of the sample
// ServiceClass that `qm dev` installs: a key-value store provisioned through
// OSB becomes a RegisteredService, Available after its first health check;
// a ServiceClaim resolves to it with the instance's own credentials; the
// deprovision takes it away and the claim goes Pending. The namespace's
// tenant-namespace instance (osb-1) is not registered.
func keyValueStoresAreClaimable(t *testing.T, call func(method, path, body string) (int, string), kube ctrlclient.Client) {
	t.Helper()
	ctx := context.Background()
	ns := devenv.SampleNamespace
	status, body := call(http.MethodPut, "/v2/service_instances/kv-1?accepts_incomplete=true", fmt.Sprintf(
		`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, keyValueStoreService, keyValueStorePlan))
	require.Equal(t, http.StatusAccepted, status, body)
	require.Eventually(t, func() bool {
		status, body := call(http.MethodGet, "/v2/service_instances/kv-1/last_operation?operation=provision", "")
		return status == http.StatusOK && strings.Contains(body, `"state":"succeeded"`)
	}, 2*time.Minute, 100*time.Millisecond, "the key-value store is provisioned")

	// The instance's own connection Secret: the one its provision applied.
	var instance osbv1alpha1.SFServiceInstance
	require.NoError(t, kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "kv-1"}, &instance))
	var secretName string
	for _, r := range instance.Status.Resources {
		if r.Kind == "Secret" {
			secretName = r.Name
		}
	}
	require.NotEmpty(t, secretName, "the provision applied a Secret: %+v", instance.Status.Resources)
	var creds corev1.Secret
	require.NoError(t, kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: secretName}, &creds))
	assert.Equal(t, secretName+"."+ns+".svc", string(creds.Data["host"]))
	assert.Len(t, creds.Data["password"], 32)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var rs primazav1alpha1.RegisteredService
		require.NoError(c, kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "sfserviceinstance-kv-1"}, &rs))
		assert.Equal(c, primazav1alpha1.ServiceAvailable, rs.Status.State)
		if assert.NotNil(c, rs.Status.HealthCheck) {
			assert.Equal(c, primazav1alpha1.CheckSucceeded, rs.Status.HealthCheck.LastResult, "its first check ran")
		}
		assert.Equal(c, []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "key-value-store"}, {Name: "provider", Value: "quartermaster"}},
			rs.Spec.ServiceClassIdentity)
		var refs []string
		for _, e := range rs.Spec.ServiceEndpointDefinition {
			if assert.NotNil(c, e.ValueFromSecret, "%s is read from the instance's Secret", e.Name) {
				refs = append(refs, e.Name+"="+e.ValueFromSecret.Name+"/"+e.ValueFromSecret.Key)
			}
		}
		assert.Equal(c, []string{"host=" + secretName + "/host", "port=" + secretName + "/port", "password=" + secretName + "/password", "uri=" + secretName + "/uri"}, refs)

		var class primazav1alpha1.ServiceClass
		require.NoError(c, kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "key-value-stores"}, &class))
		assert.EqualValues(c, 1, class.Status.Services, "the key-value store, not the tenant namespace")
		if ready := meta.FindStatusCondition(class.Status.Conditions, "Ready"); assert.NotNil(c, ready) {
			assert.Equal(c, "True: 1 SFServiceInstance registered", string(ready.Status)+": "+ready.Message)
		}
	}, 2*time.Minute, 200*time.Millisecond, "the key-value store is a RegisteredService, Available after its first check")

	claim := &primazav1alpha1.ServiceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: ns},
		Spec: primazav1alpha1.ServiceClaimSpec{
			ServiceClassIdentity:          []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "key-value-store"}},
			ServiceEndpointDefinitionKeys: []string{"host", "port", "password", "uri"},
			EnvironmentTag:                "dev",
		},
	}
	require.NoError(t, kube.Create(ctx, claim))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got primazav1alpha1.ServiceClaim
		require.NoError(c, kube.Get(ctx, ctrlclient.ObjectKeyFromObject(claim), &got))
		assert.Equal(c, primazav1alpha1.ClaimResolved, got.Status.State)
		assert.Equal(c, "sfserviceinstance-kv-1", got.Status.RegisteredService)
		if assert.NotNil(c, got.Status.Binding) {
			var projected corev1.Secret
			require.NoError(c, kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: got.Status.Binding.Name}, &projected))
			for _, key := range []string{"host", "port", "password", "uri"} {
				assert.Equal(c, string(creds.Data[key]), string(projected.Data[key]), "the claim's %s is the instance's", key)
			}
		}
	}, 30*time.Second, 100*time.Millisecond, "the claim resolves to the key-value store")

	status, body = call(http.MethodDelete, fmt.Sprintf("/v2/service_instances/kv-1?service_id=%s&plan_id=%s&accepts_incomplete=true", keyValueStoreService, keyValueStorePlan), "")
	require.Equal(t, http.StatusAccepted, status, body)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := kube.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "sfserviceinstance-kv-1"}, &primazav1alpha1.RegisteredService{})
		assert.True(c, apierrors.IsNotFound(err), "the RegisteredService is gone: %v", err)
		var got primazav1alpha1.ServiceClaim
		require.NoError(c, kube.Get(ctx, ctrlclient.ObjectKeyFromObject(claim), &got))
		assert.Equal(c, primazav1alpha1.ClaimPending, got.Status.State)
	}, time.Minute, 100*time.Millisecond, "the deprovision takes the service away, and the claim waits for another")
}
