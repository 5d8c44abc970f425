package fairness_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestTheQueueKeysOSBInstancesByOrganization: a reconcile queue's tenant
// of an instance the OSB API recorded in the catalog namespace is its
// organization, so that one organization's burst does not hold another's
// provision; in a tenant's namespace it is the namespace. The same whether
// the watcher's cache watches every namespace or some of them (an
// informer each, and no one store to look in).
func TestTheQueueKeysOSBInstancesByOrganization(t *testing.T) {
	kube := testenv.Kubernetes(t)
	catalog, tenant := kube.Namespace(t), kube.Namespace(t)
	instance := func(ns, name, org string) {
		require.NoError(t, kube.Client.Create(t.Context(), &osbv1alpha1.SFServiceInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: "svc", PlanID: "plan",
				OrganizationGUID: org, SpaceGUID: "s"}}))
	}
	instance(catalog, "a", "org-a")
	instance(catalog, "b", "org-b")
	instance(tenant, "t", "org-a")
	req := func(ns, name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	trusted := func(ns string) bool { return ns == catalog }

	for _, watched := range [][]string{nil, {catalog, tenant}} {
		opts := cache.Options{Scheme: crds.NewScheme()}
		if watched != nil {
			opts.DefaultNamespaces = map[string]cache.Config{}
			for _, ns := range watched {
				opts.DefaultNamespaces[ns] = cache.Config{}
			}
		}
		c, err := cache.New(kube.Config, opts)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Start(ctx) }()
		require.True(t, c.WaitForCacheSync(ctx))
		tenantOf := fairness.OfRequest(c, func() client.Object { return &osbv1alpha1.SFServiceInstance{} }, trusted)

		assert.Equal(t, fairness.Tenant(catalog, "org-a"), tenantOf(req(catalog, "a")), "watching %v", watched)
		assert.Equal(t, fairness.Tenant(catalog, "org-b"), tenantOf(req(catalog, "b")), "watching %v", watched)
		assert.Equal(t, fairness.Tenant(tenant, ""), tenantOf(req(tenant, "t")), "a tenant's namespace is its key, watching %v", watched)
		assert.Equal(t, fairness.Tenant(catalog, ""), tenantOf(req(catalog, "gone")), "one deleted counts for its namespace, watching %v", watched)
		cancel()
		require.NoError(t, <-done)
	}
}

func TestMain(m *testing.M) { testenv.Main(m) }
