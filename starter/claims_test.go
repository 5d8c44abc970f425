package starter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// dbService registers a psqlserver service whose password is in a Secret.
func dbService(t *testing.T, s *testenv.System, name, typ, host string) {
	t.Helper()
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: RegisteredService
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: %s}, {name: provider, value: aws}]
  serviceEndpointDefinition:
  - {name: host, value: %s}
  - {name: password, valueFromSecret: {name: db-credentials, key: password}}`, name, s.Namespace, typ, host))
}

// dbClaim claims a psqlserver with host and password from dev.
func dbClaim(t *testing.T, s *testenv.System, name string) {
	t.Helper()
	s.Create(dbClaimManifest(s, name))
}

// dbClaimManifest is a claim of a psqlserver's host and password in dev.
func dbClaimManifest(s *testenv.System, name string) string {
	return fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: %s, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host, password]
  environmentTag: dev`, name, s.Namespace)
}

func getClaim(c require.TestingT, s *testenv.System, name string) *primazav1alpha1.ServiceClaim {
	var claim primazav1alpha1.ServiceClaim
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &claim))
	return &claim
}

func getService(c require.TestingT, s *testenv.System, name string) *primazav1alpha1.RegisteredService {
	var svc primazav1alpha1.RegisteredService
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &svc))
	return &svc
}

// waitClaim waits until the claim is in state, holding service ("" for
// none), and returns it.
func waitClaim(t *testing.T, s *testenv.System, name string, state primazav1alpha1.ClaimState, service string) *primazav1alpha1.ServiceClaim {
	t.Helper()
	var claim *primazav1alpha1.ServiceClaim
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		claim = getClaim(c, s, name)
		assert.Equal(c, state, claim.Status.State)
		assert.Equal(c, service, claim.Status.RegisteredService)
	}, 30*time.Second, 50*time.Millisecond, "claim %s becomes %s with %q", name, state, service)
	return claim
}

// binding reads the claim's binding Secret.
func binding(c require.TestingT, s *testenv.System, name string) map[string]string {
	var secret corev1.Secret
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &secret))
	out := map[string]string{}
	for k, v := range secret.Data {
		out[k] = string(v)
	}
	return out
}

// TestClaimUseCases walks Primaza's use cases: a claim resolves to the
// one matching service and gets its endpoint in a Secret; a change of the
// service's endpoint rewrites it; a change that stops the service matching
// re-matches the claim; deleting the claimed service sends the claim back
// to Pending, saying why, until a service matches again; deleting the
// claim releases the service and its Secret. The password, read from a
// Secret, never enters the workflow's history.
func TestClaimUseCases(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	ctx := context.Background()
	const password = "s3cret-value-kept-out-of-histories"
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": %q}}`, s.Namespace, password))
	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	waitService(t, s, "db-1", primazav1alpha1.ServiceAvailable, flipWithin)

	// Creation.
	dbClaim(t, s, "app")
	claim := waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-1")
	assert.Equal(t, "app", claim.Status.Binding.Name)
	assert.True(t, meta.IsStatusConditionTrue(claim.Status.Conditions, "Resolved"))
	assert.Equal(t, map[string]string{"host": "db-1.example", "password": password, "type": "psqlserver", "provider": "aws"}, binding(t, s, "app"))
	svc := getService(t, s, "db-1")
	assert.Equal(t, primazav1alpha1.ServiceClaimed, svc.Status.State)
	assert.Equal(t, &primazav1alpha1.ClaimReference{Name: "app", UID: claim.UID}, svc.Status.ClaimRef)
	assert.Equal(t, svc.UID, claim.Status.RegisteredServiceUID)

	// Update of the claimed service: a new endpoint value is rewritten.
	base := svc.DeepCopy()
	svc.Spec.ServiceEndpointDefinition[0].Value = new("db-1b.example")
	require.NoError(t, s.Kube.Client.Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "db-1b.example", binding(c, s, "app")["host"])
	}, 15*time.Second, 50*time.Millisecond, "the Secret follows the service's endpoint")

	// An update that stops it matching: the claim moves to the spare.
	dbService(t, s, "db-2", "psqlserver", "db-2.example")
	waitService(t, s, "db-2", primazav1alpha1.ServiceAvailable, flipWithin)
	svc = getService(t, s, "db-1")
	base = svc.DeepCopy()
	svc.Spec.ServiceClassIdentity[0].Value = "mysql"
	require.NoError(t, s.Kube.Client.Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-2")
	assert.Equal(t, "db-2.example", binding(t, s, "app")["host"])
	released := waitService(t, s, "db-1", primazav1alpha1.ServiceAvailable, 10*time.Second)
	assert.Nil(t, released.Status.ClaimRef, "the service it left is released")

	// Deleting the claimed service: Pending, saying why, without a Secret.
	require.NoError(t, s.Kube.Client.Delete(ctx, getService(t, s, "db-2")))
	claim = waitClaim(t, s, "app", primazav1alpha1.ClaimPending, "")
	assert.Equal(t, "no Available service of class type=psqlserver defines host, password for environment dev",
		meta.FindStatusCondition(claim.Status.Conditions, "Resolved").Message)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app"}, &corev1.Secret{})
		assert.True(c, apierrors.IsNotFound(err), "a Pending claim has no binding: %v", err)
	}, 10*time.Second, 50*time.Millisecond)

	// A service that matches again resolves it, through a signal.
	svc = getService(t, s, "db-1")
	base = svc.DeepCopy()
	svc.Spec.ServiceClassIdentity[0].Value = "psqlserver"
	require.NoError(t, s.Kube.Client.Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-1")

	// Deleting the claim releases the service and its Secret.
	require.NoError(t, s.Kube.Client.Delete(ctx, getClaim(t, s, "app")))
	s.WaitGone(&primazav1alpha1.ServiceClaim{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: s.Namespace}})
	released = waitService(t, s, "db-1", primazav1alpha1.ServiceAvailable, 10*time.Second)
	assert.Nil(t, released.Status.ClaimRef)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app"}, &corev1.Secret{})))

	id := runs.ClaimID(s.Namespace, "app")
	h := s.History(id, s.ClosedRun(id, runs.ClaimType))
	assert.NotContains(t, testenv.HistoryText(h), password, "the password never enters the history")
	assert.Contains(t, testenv.HistoryText(h), `"service":"db-1"`, "the history is read decoded: names, not values")
	recorded(t, h, "claim")
	// The namespace's allocator, still running: each of the claim's asks
	// was a pass that handed it a service.
	allocator := s.History(runs.AllocatorID(s.Namespace), "")
	assert.Contains(t, testenv.HistoryText(allocator), `["app"]`, "the allocator's passes name their claims, read decoded")
	recorded(t, allocator, "claim-allocator")
}

// TestClaimGetsItsFinalizerBack: the admission policy gives a claim its
// finalizer at create; one that lost it (a cluster without the policies,
// or a user's edit) gets it back from its workflow at its next
// resolution, so that deleting it still releases its service.
func TestClaimGetsItsFinalizerBack(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	ctx := context.Background()
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": "pw"}}`, s.Namespace))
	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	waitService(t, s, "db-1", primazav1alpha1.ServiceAvailable, flipWithin)
	dbClaim(t, s, "app")
	claim := waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "db-1")
	assert.Equal(t, []string{primazav1alpha1.ClaimFinalizer}, claim.Finalizers, "from the admission policy")

	require.NoError(t, s.Kube.Client.Patch(ctx, claim, ctrlclient.RawPatch(types.JSONPatchType, []byte(`[{"op": "remove", "path": "/metadata/finalizers"}]`))))
	require.Empty(t, claim.Finalizers)
	svc := getService(t, s, "db-1")
	base := svc.DeepCopy()
	svc.Spec.ServiceEndpointDefinition[0].Value = new("db-1b.example")
	require.NoError(t, s.Kube.Client.Patch(ctx, svc, ctrlclient.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "db-1b.example", binding(c, s, "app")["host"])
		assert.Equal(c, []string{primazav1alpha1.ClaimFinalizer}, getClaim(c, s, "app").Finalizers)
	}, 15*time.Second, 50*time.Millisecond, "the next resolution adds the finalizer again")

	require.NoError(t, s.Kube.Client.Delete(ctx, claim))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Nil(c, getService(c, s, "db-1").Status.ClaimRef)
	}, 15*time.Second, 50*time.Millisecond, "the deleted claim released its service")
}

// TestClaimedServiceUnreachable: a claimed service that turns Unreachable
// keeps its claim, whose condition says so until the service is back.
func TestClaimedServiceUnreachable(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	l := listen(t)
	registered(t, s, "checked", fmt.Sprintf(`    tcp: {host: 127.0.0.1, port: %s, minutes: 1, timeoutSeconds: 1}`, l.port()))
	waitService(t, s, "checked", primazav1alpha1.ServiceAvailable, flipWithin)
	s.Create(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: app, namespace: ` + s.Namespace + `}
spec:
  serviceClassIdentity: [{name: type, value: test}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev`)
	waitClaim(t, s, "app", primazav1alpha1.ClaimResolved, "checked")

	l.close()
	waitService(t, s, "checked", primazav1alpha1.ServiceUnreachable, flipWithin)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		claim := getClaim(c, s, "app")
		assert.Equal(c, primazav1alpha1.ClaimResolved, claim.Status.State, "the claim keeps its service")
		cond := meta.FindStatusCondition(claim.Status.Conditions, "ServiceAvailable")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionFalse, cond.Status)
		assert.Contains(c, cond.Message, "the service is Unreachable: tcp ")
	}, 15*time.Second, 50*time.Millisecond, "the claim reports its service down")

	l.open()
	waitService(t, s, "checked", primazav1alpha1.ServiceClaimed, flipWithin)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, meta.IsStatusConditionTrue(getClaim(c, s, "app").Status.Conditions, "ServiceAvailable"))
	}, 15*time.Second, 50*time.Millisecond, "and back to normal")
}

// TestClaimRace: 50 claims created at once for 10 matching services, with
// the worker and then the watcher restarted in the middle: exactly 10 resolve, each service is
// held by exactly one of them, and 40 stay Pending; at no moment in
// between did two claims say they held one service. Deleting 5 resolved
// claims resolves exactly 5 pending ones. It runs with one worker, then
// with two (claims taken by two processes at once).
func TestClaimRace(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) { claimRace(t, workers) })
	}
}

func claimRace(t *testing.T, workers int) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	for range workers - 1 {
		s.StartAnotherWorker()
	}
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": "pw"}}`, s.Namespace))
	for i := range 10 {
		dbService(t, s, fmt.Sprintf("db-%02d", i), "psqlserver", fmt.Sprintf("db-%02d.example", i))
	}
	for i := range 10 {
		waitService(t, s, fmt.Sprintf("db-%02d", i), primazav1alpha1.ServiceAvailable, flipWithin)
	}
	stopWatching := watchExclusive(t, s)
	var wg sync.WaitGroup
	created := make([]error, 50)
	for i := range created {
		wg.Go(func() { _, created[i] = s.TryCreate(dbClaimManifest(s, fmt.Sprintf("claim-%02d", i))) })
		switch i {
		case 20:
			s.StopWorker()
			s.StartWorker()
		case 30:
			s.RestartWatcher()
		}
	}
	wg.Wait()
	require.NoError(t, errors.Join(created...))
	held := checkExclusive(t, s, 10, 40)

	for _, name := range held[:5] {
		require.NoError(t, s.Kube.Client.Delete(context.Background(), getClaim(t, s, name)))
	}
	checkExclusive(t, s, 10, 35)
	assert.Empty(t, stopWatching(), "no two claims held one service at any moment")
}

// watchExclusive watches the namespace's claims from now until the
// function it returns is called, which returns every moment two claims
// not being deleted said they held one service: the end state alone would
// not show a double grant undone before it.
func watchExclusive(t *testing.T, s *testenv.System) func() []string {
	t.Helper()
	var reports []string
	holds := map[string]string{} // claim -> the service it says it holds
	stop := s.Kube.Watch(t, &primazav1alpha1.ServiceClaimList{}, func(ev watch.Event) {
		claim, ok := ev.Object.(*primazav1alpha1.ServiceClaim)
		if !ok {
			return
		}
		delete(holds, claim.Name)
		if ev.Type != watch.Deleted && claim.DeletionTimestamp.IsZero() && claim.Status.State == primazav1alpha1.ClaimResolved {
			holds[claim.Name] = claim.Status.RegisteredService
		}
		by := map[string]string{}
		for name, svc := range holds {
			if other, twice := by[svc]; twice {
				reports = append(reports, fmt.Sprintf("%s and %s both hold %s", other, name, svc))
			}
			by[svc] = name
		}
	}, ctrlclient.InNamespace(s.Namespace))
	return func() []string {
		stop()
		return reports
	}
}

// watchClaimRefs watches the namespace's RegisteredServices from now until
// the function it returns is called, which returns, for each service, the
// UIDs of every claim its status said held it meanwhile: every write, where
// a look at the end would miss a service held a moment by another claim.
func watchClaimRefs(t *testing.T, s *testenv.System) func() map[string][]types.UID {
	t.Helper()
	held := map[string][]types.UID{}
	stop := s.Kube.Watch(t, &primazav1alpha1.RegisteredServiceList{}, func(ev watch.Event) {
		svc, ok := ev.Object.(*primazav1alpha1.RegisteredService)
		if ok && svc.Status.ClaimRef != nil && !slices.Contains(held[svc.Name], svc.Status.ClaimRef.UID) {
			held[svc.Name] = append(held[svc.Name], svc.Status.ClaimRef.UID)
		}
	}, ctrlclient.InNamespace(s.Namespace))
	return func() map[string][]types.UID {
		stop()
		return held
	}
}

// checkExclusive waits until resolved claims are Resolved and pending
// Pending, and checks that each service is held by the one claim that
// says it holds it; it returns the resolved claims.
func checkExclusive(t *testing.T, s *testenv.System, resolved, pending int) []string {
	t.Helper()
	var holders []string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var claimList primazav1alpha1.ServiceClaimList
		var services primazav1alpha1.RegisteredServiceList
		require.NoError(c, s.Kube.Client.List(context.Background(), &claimList, ctrlclient.InNamespace(s.Namespace)))
		require.NoError(c, s.Kube.Client.List(context.Background(), &services, ctrlclient.InNamespace(s.Namespace)))
		byService := map[string]string{}
		holders = nil
		states := map[primazav1alpha1.ClaimState]int{}
		for _, claim := range claimList.Items {
			states[claim.Status.State]++
			if claim.Status.State == primazav1alpha1.ClaimResolved {
				assert.NotContains(c, byService, claim.Status.RegisteredService, "two claims say they hold one service")
				byService[claim.Status.RegisteredService] = claim.Name
				holders = append(holders, claim.Name)
			}
		}
		assert.Equal(c, map[primazav1alpha1.ClaimState]int{primazav1alpha1.ClaimResolved: resolved, primazav1alpha1.ClaimPending: pending}, states)
		for _, svc := range services.Items {
			require.NotNil(c, svc.Status.ClaimRef, "service %s is held", svc.Name)
			assert.Equal(c, byService[svc.Name], svc.Status.ClaimRef.Name, "service %s is held by the claim that says so", svc.Name)
			assert.Equal(c, primazav1alpha1.ServiceClaimed, svc.Status.State)
		}
	}, time.Minute, 200*time.Millisecond, "%d claims resolve, %d stay pending, one claim per service", resolved, pending)
	return holders
}
