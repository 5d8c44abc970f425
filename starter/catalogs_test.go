package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/watch"
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
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
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
	// The catalogs follow the services' states: each wait below starts
	// once the states are what it expects, so that the health checks'
	// own time (through Temporal, under the suite's load) does not count
	// against the catalogs' bound.
	for _, name := range []string{"everywhere", "flaky", "dev-only", "not-prod", "prod-only"} {
		waitService(t, s, name, primazav1alpha1.ServiceAvailable, flipWithin)
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
	waitService(t, s, "flaky", primazav1alpha1.ServiceUnreachable, flipWithin)
	waitCatalogs(t, s, map[string][]string{
		"dev":  {"dev-only", "everywhere", "not-prod"},
		"prod": {"everywhere", "prod-only"},
	}, "an Unreachable service leaves every catalog")
	l.open()
	waitService(t, s, "flaky", primazav1alpha1.ServiceAvailable, flipWithin)
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

// catalogWrite is a write of a catalog's list, as a watch saw it.
type catalogWrite struct {
	at         time.Time
	generation int64
}

// TestCatalogsWrittenAtMostEveryFiveSeconds: a burst of services, one
// every 300 ms for 6 s, reaches the dev catalog in few writes, each at
// least five seconds after the one before (catalogInterval: a catalog of
// a thousand services is costly to write), and the last one lists every
// service within seconds of the burst's end.
func TestCatalogsWrittenAtMostEveryFiveSeconds(t *testing.T) {
	const burst, pace, interval = 20, 300 * time.Millisecond, 5 * time.Second
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: from-dev, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: nothing}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev`, s.Namespace))
	registered(t, s, "svc-00", "")
	want := []string{"svc-00"}
	waitCatalogs(t, s, map[string][]string{"dev": want}, "the dev catalog lists the first service")

	// A watch of the catalog sees each write of its list, which raises its
	// generation (its status's count is written apart and does not): every
	// write with the moment it arrived, where a poll would read two writes
	// close together as one. Its goroutine only records.
	var (
		mu     sync.Mutex
		writes []catalogWrite
		last   int64
	)
	stopWatch := s.Kube.Watch(t, &primazav1alpha1.ServiceCatalogList{}, func(ev watch.Event) {
		if cat, ok := ev.Object.(*primazav1alpha1.ServiceCatalog); ok && cat.Generation != last {
			mu.Lock()
			writes = append(writes, catalogWrite{at: time.Now(), generation: cat.Generation})
			mu.Unlock()
			last = cat.Generation
		}
	}, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingFields{"metadata.name": "dev"})

	tick := time.NewTicker(pace)
	for i := 1; i <= burst; i++ {
		<-tick.C
		name := fmt.Sprintf("svc-%02d", i)
		registered(t, s, name, "")
		want = append(want, name)
	}
	tick.Stop()
	waitCatalogs(t, s, map[string][]string{"dev": want}, "the dev catalog lists the whole burst within seconds")
	stopWatch()

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, writes)
	during := writes[1:] // the first is the catalog as it was before the burst
	require.GreaterOrEqual(t, len(during), 2, "the burst of %s took more than one write: %v", time.Duration(burst)*pace, writes)
	assert.LessOrEqual(t, len(during), 3, "a burst of %s is written at most once every %s: %v", time.Duration(burst)*pace, interval, writes)
	// The first event is the catalog as it was before the burst, seen
	// when the watch began: each later one is one write, a generation up.
	for i := 1; i < len(writes); i++ {
		assert.Equal(t, writes[i-1].generation+1, writes[i].generation, "every write is seen: %v", writes)
	}
	for i := 2; i < len(writes); i++ {
		// Both ends arrive through the same watch: 100 ms is what the API
		// server's and the watch's own delays allow.
		gap := writes[i].at.Sub(writes[i-1].at)
		assert.GreaterOrEqual(t, gap, interval-100*time.Millisecond, "write %d came %s after the one before", i, gap)
	}
}
