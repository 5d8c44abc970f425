package offerings_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAPlanTheCacheHasNotSeen: a plan and its service created while the
// cache does not see them (its watch stopped after it synced, as an
// informer lags behind a create) are found on the API server, where an
// operation would otherwise fail as "unknown plan"; an ID no plan has is
// still ErrNotFound.
func TestAPlanTheCacheHasNotSeen(t *testing.T) {
	kube := testenv.BareKubernetes(t)
	ns := kube.Namespace(t)
	c, err := offerings.New(kube.Config, crds.NewScheme(), ns, tenancy.Boundary{Catalog: []string{ns}})
	require.NoError(t, err)
	watching, stop := context.WithCancel(context.Background())
	require.NoError(t, c.Start(watching))
	stop()

	ctx := context.Background()
	require.NoError(t, kube.Client.Create(ctx, &osbv1alpha1.SFService{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: ns},
		Spec: osbv1alpha1.SFServiceSpec{Name: "svc", ID: ns + "-svc", Description: "d", Bindable: true}}))
	require.NoError(t, kube.Client.Create(ctx, &osbv1alpha1.SFPlan{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: ns},
		Spec: osbv1alpha1.SFPlanSpec{Name: "small", ID: ns + "-small", ServiceID: ns + "-svc", Description: "d"}}))
	assert.Never(t, func() bool {
		plans, err := c.Plans(ctx)
		return err != nil || slices.ContainsFunc(plans, func(p osbv1alpha1.SFPlan) bool { return p.Spec.ID == ns+"-small" })
	}, time.Second, 50*time.Millisecond, "the cache does not see the new plan")

	plan, err := c.Plan(ctx, ns+"-small")
	require.NoError(t, err)
	assert.Equal(t, "small", plan.Name)
	svc, err := c.Service(ctx, plan.Spec.ServiceID)
	require.NoError(t, err)
	assert.Equal(t, "svc", svc.Name)
	_, err = c.Plan(ctx, ns+"-none")
	assert.ErrorIs(t, err, offerings.ErrNotFound)
}

// TestATenantsCopyOfACatalogIDIsNeverServed: a tenant's SFPlan and
// SFService that repeat the catalog's IDs neither break nor shadow them,
// for any namespace's instances; a tenant's own plan serves its namespace
// only, and the catalog lists none of the tenant's.
func TestATenantsCopyOfACatalogIDIsNeverServed(t *testing.T) {
	kube := testenv.BareKubernetes(t)
	catalog, tenantA, tenantB := kube.Namespace(t), kube.Namespace(t), kube.Namespace(t)
	ctx := context.Background()
	offering := func(ns, name, id string) {
		require.NoError(t, kube.Client.Create(ctx, &osbv1alpha1.SFService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: osbv1alpha1.SFServiceSpec{Name: name, ID: id + "-svc", Description: "d", Bindable: true}}))
		require.NoError(t, kube.Client.Create(ctx, &osbv1alpha1.SFPlan{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: osbv1alpha1.SFPlanSpec{Name: name, ID: id, ServiceID: id + "-svc", Description: "d"}}))
	}
	offering(catalog, "shared", "shared")
	offering(tenantA, "copy", "shared")
	offering(tenantA, "own", "own")

	c, err := offerings.New(kube.Config, crds.NewScheme(), "", tenancy.Boundary{Catalog: []string{catalog}})
	require.NoError(t, err)
	running, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	require.NoError(t, c.Start(running))

	for _, ns := range []string{catalog, tenantA, tenantB} {
		p, err := c.PlanFor(ctx, "shared", ns)
		require.NoError(t, err, "an instance of %s", ns)
		assert.Equal(t, catalog, p.Namespace, "an instance of %s gets the catalog's plan", ns)
		s, err := c.ServiceFor(ctx, "shared-svc", ns)
		require.NoError(t, err)
		assert.Equal(t, catalog, s.Namespace)
	}
	p, err := c.PlanFor(ctx, "own", tenantA)
	require.NoError(t, err)
	assert.Equal(t, tenantA+"/own", p.Namespace+"/"+p.Name)
	_, err = c.PlanFor(ctx, "own", tenantB)
	require.ErrorIs(t, err, offerings.ErrNotFound, "another tenant's plan is not found")
	_, err = c.Plan(ctx, "own")
	require.ErrorIs(t, err, offerings.ErrNotFound, "the catalog has no tenant's plan")

	plans, err := c.Plans(ctx)
	require.NoError(t, err)
	require.Len(t, plans, 1)
	assert.Equal(t, catalog, plans[0].Namespace)
	services, err := c.Services(ctx)
	require.NoError(t, err)
	require.Len(t, services, 1)
	assert.Equal(t, catalog, services[0].Namespace)
}
