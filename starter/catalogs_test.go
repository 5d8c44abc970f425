package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// catalog lists the services of the catalog of env, as kubectl shows it.
func catalog(c *assert.CollectT, s *testenv.System, env string) []string {
	var cat primazav1alpha1.ServiceCatalog
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: env}, &cat))
	names := []string{}
	for _, svc := range cat.Spec.Services {
		names = append(names, svc.Name)
	}
	assert.EqualValues(c, len(names), cat.Status.ServiceCount)
	return names
}

// waitCatalogs waits until each environment's catalog lists want.
func waitCatalogs(t *testing.T, s *testenv.System, want map[string][]string, why string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for env, names := range want {
			assert.Equal(c, names, catalog(c, s, env), "the catalog of %s", env)
		}
	}, 15*time.Second, 50*time.Millisecond, why)
}

// TestCatalogsFollowServices: each environment that services and claims
// name has a ServiceCatalog listing what it may claim, as the services'
// constraints say (dev and prod differ), without endpoint values; services
// that turn Unreachable, are claimed or are deleted leave it within
// seconds, and come back when they are Available again.
func TestCatalogsFollowServices(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	l := listen(t)
	constrained := func(name, envs string) {
		s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinition: [{name: host, value: db-secret-host.example}, {name: port, value: "5432"}]
  constraints: {environments: %s}`, name, s.Namespace, envs))
	}
	registered(t, s, "everywhere", "")
	registered(t, s, "flaky", fmt.Sprintf(`    tcp: {host: 127.0.0.1, port: %s, minutes: 1, timeoutSeconds: 1}`, l.port()))
	constrained("dev-only", `[dev]`)
	constrained("not-prod", `["!prod", dev]`)
	constrained("prod-only", `[prod]`)
	// A claim from stage that no service can resolve (none has the key):
	// it names the environment and takes nothing.
	s.Create(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: from-stage, namespace: ` + s.Namespace + `}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [replica-host]
  environmentTag: stage`)

	all := map[string][]string{
		"dev":   {"dev-only", "everywhere", "flaky", "not-prod"},
		"prod":  {"everywhere", "flaky", "prod-only"},
		"stage": {"everywhere", "flaky", "not-prod"},
	}
	waitCatalogs(t, s, all, "every environment has its catalog")
	waitClaim(t, s, "from-stage", primazav1alpha1.ClaimPending, "")
	var dev primazav1alpha1.ServiceCatalog
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "dev"}, &dev))
	raw, err := json.Marshal(dev)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "db-secret-host.example", "a catalog lists keys, never values")
	assert.Contains(t, string(raw), `"serviceEndpointDefinitionKeys":["host","port"]`)

	l.close()
	waitCatalogs(t, s, map[string][]string{
		"dev":  {"dev-only", "everywhere", "not-prod"},
		"prod": {"everywhere", "prod-only"},
	}, "an Unreachable service leaves every catalog")
	l.open()
	waitCatalogs(t, s, all, "and comes back when it is Available again")

	var everywhere primazav1alpha1.RegisteredService
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "everywhere"}, &everywhere))
	base := everywhere.DeepCopy()
	everywhere.Status.State = primazav1alpha1.ServiceClaimed
	everywhere.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: "someone", UID: "u-1"}
	require.NoError(t, s.Kube.Client.Status().Patch(context.Background(), &everywhere, ctrlclient.MergeFrom(base)))
	prodOnly := &primazav1alpha1.RegisteredService{}
	prodOnly.Name, prodOnly.Namespace = "prod-only", s.Namespace
	require.NoError(t, s.Kube.Client.Delete(context.Background(), prodOnly))
	waitCatalogs(t, s, map[string][]string{
		"dev":   {"dev-only", "flaky", "not-prod"},
		"prod":  {"flaky"},
		"stage": {"flaky", "not-prod"},
	}, "a claimed service and a deleted one leave")
}
