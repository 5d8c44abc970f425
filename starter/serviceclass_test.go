package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestServiceClassRegistersItsResources, in Primaza's style: a
// ServiceClass over a CRD kind (a third party's Database), with a JSONPath
// field, a field kept secret and a linked Secret. Each Database gets a
// RegisteredService within seconds that carries the class's identity and
// constraints, its host and port in clear, its user in a Secret of its own
// and its password by reference to the Secret it names; a changed field
// changes it; a claim resolves against it and holds the values, and
// follows the linked Secret when it changes; the Database deleted takes it
// away, and the claim goes Pending.
func TestServiceClassRegistersItsResources(t *testing.T) {
	ctx := context.Background()
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	s.InstallCRD("database")
	s.Create(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: orders-creds, namespace: %s}\nstringData: {password: s3cret}", s.Namespace))
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClass
metadata: {name: databases, namespace: %s}
spec:
  constraints: {environments: [dev]}
  serviceClassIdentity: [{name: type, value: psqlserver}, {name: provider, value: example}]
  resource:
    apiVersion: example.com/v1
    kind: Database
    serviceEndpointDefinitionMappings:
      resourceFields:
      - {name: host, jsonPath: .spec.host, secret: false}
      - {name: port, jsonPath: .spec.port, secret: false}
      - {name: user, jsonPath: .spec.user}
      secretRefFields:
      - {name: password, secretName: {jsonPath: .spec.credentials}, secretKey: {constant: password}}`, s.Namespace))
	database := func(host string) {
		t.Helper()
		s.Kube.Kubectl(t, fmt.Sprintf(`
apiVersion: example.com/v1
kind: Database
metadata: {name: orders, namespace: %s}
spec: {host: %s, port: 5432, user: app, credentials: orders-creds}`, s.Namespace, host), "apply", "-f", "-")
	}
	database("orders-1.db")
	registered := func(host string) *primazav1alpha1.RegisteredService {
		t.Helper()
		var rs *primazav1alpha1.RegisteredService
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rs = getService(c, s, "database-orders")
			assert.Equal(c, []primazav1alpha1.ServiceEndpointDefinitionItem{
				{Name: "host", Value: ptr.To(host)},
				{Name: "port", Value: ptr.To("5432")},
				{Name: "user", ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: "database-orders", Key: "user"}},
				{Name: "password", ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: "orders-creds", Key: "password"}},
			}, rs.Spec.ServiceEndpointDefinition)
		}, 15*time.Second, 50*time.Millisecond, "the Database at %s is registered", host)
		return rs
	}
	rs := registered("orders-1.db")
	assert.Equal(t, []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}, {Name: "provider", Value: "example"}}, rs.Spec.ServiceClassIdentity)
	assert.Equal(t, &primazav1alpha1.Constraints{Environments: []string{"dev"}}, rs.Spec.Constraints)
	var values corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "database-orders"}, &values))
	assert.Equal(t, map[string][]byte{"user": []byte("app")}, values.Data, "the secret field, and only it, in a Secret of its own")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var class primazav1alpha1.ServiceClass
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "databases"}, &class))
		assert.EqualValues(c, 1, class.Status.Services)
		ready := meta.FindStatusCondition(class.Status.Conditions, "Ready")
		require.NotNil(c, ready)
		assert.Equal(c, "True Registered 1 Database registered", string(ready.Status)+" "+ready.Reason+" "+ready.Message)
	}, 15*time.Second, 50*time.Millisecond, "the class says what it keeps")

	// A changed field changes the RegisteredService.
	database("orders-2.db")
	registered("orders-2.db")

	// A claim resolves against it, with the values of both Secrets.
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: orders-db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host, user, password]
  environmentTag: dev`, s.Namespace))
	waitClaim(t, s, "orders-db", primazav1alpha1.ClaimResolved, "database-orders")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := binding(c, s, "orders-db")
		assert.Equal(c, "orders-2.db", got["host"])
		assert.Equal(c, "app", got["user"])
		assert.Equal(c, "s3cret", got["password"])
	}, 15*time.Second, 50*time.Millisecond, "the claim's Secret holds the service's values")

	// The linked Secret rotated: the claim's Secret follows, as the service
	// refers to it rather than copying it.
	s.Kube.Kubectl(t, "", "patch", "secret", "orders-creds", "-n", s.Namespace, "--type=merge", "-p", `{"stringData":{"password":"n3w"}}`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "n3w", binding(c, s, "orders-db")["password"])
	}, 15*time.Second, 50*time.Millisecond, "the claim's Secret follows the linked Secret")

	// The Database deleted: its RegisteredService and Secret go, and the
	// claim waits for another.
	db := &primazav1alpha1.RegisteredService{}
	db.Name, db.Namespace = "database-orders", s.Namespace
	s.Kube.Kubectl(t, "", "delete", "database.example.com", "orders", "-n", s.Namespace)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := s.Kube.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: "database-orders"}, db)
		assert.True(c, apierrors.IsNotFound(err), "the RegisteredService is gone: %v", err)
		err = s.Kube.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: "database-orders"}, &corev1.Secret{})
		assert.True(c, apierrors.IsNotFound(err), "its Secret is gone: %v", err)
	}, 15*time.Second, 50*time.Millisecond, "the Database's RegisteredService goes with it")
	waitClaim(t, s, "orders-db", primazav1alpha1.ClaimPending, "")
}
