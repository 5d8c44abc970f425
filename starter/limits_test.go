package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/api"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// TestInstanceLimits: the three limits on the real servers, each refused
// where its user meets it. A plan's maxInstances: the OSB API answers 403
// and names it, and a kubectl instance beyond it fails with a description
// that names it, nothing applied; every instance counts until deleted. An
// organization's limit (the API's): 403 for organization_guid and for a
// Kubernetes platform's namespace alike. A namespace's annotation: the
// watcher writes a ResourceQuota, and the API server refuses kubectl's
// create, and the API a provision, until the annotation goes.
func TestInstanceLimits(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true,
		APILimits: api.Limits{InstancesPerOrganization: 1}})
	ctx := context.Background()
	limited := s.Plan("limited", "  maxInstances: 2\n", testenv.Templates("instant"))
	open := s.Plan("open", "", testenv.Templates("instant"))
	provision := func(id, plan, tenant string) string {
		return fmt.Sprintf(`{"service_id": %q, "plan_id": %q, %s}`, s.ServiceID, plan, tenant)
	}
	org := func(guid string) string { return fmt.Sprintf(`"organization_guid": %q, "space_guid": "s"`, guid) }
	orgA := org("org-a")
	refused := func(path, body, description string) {
		t.Helper()
		code, got, _ := s.Do(http.MethodPut, path, body, nil)
		assert.Equal(t, http.StatusForbidden, code, "PUT %s: %s", path, got)
		assert.Contains(t, got, description, "PUT %s", path)
	}

	// A plan's maxInstances.
	for _, id := range []string{"p-1", "p-2"} {
		s.Expect(http.MethodPut, "/v2/service_instances/"+id, provision(id, limited, org(id)), http.StatusCreated, `{}`)
	}
	refused("/v2/service_instances/p-3", provision("p-3", limited, org("p-3")),
		`plan \"limited\" allows at most 2 instances, and 2 exist: deprovision one, or ask the operator for a higher limit`)
	s.Expect(http.MethodPut, "/v2/service_instances/p-1", provision("p-1", limited, org("p-1")), http.StatusOK, `{}`)

	// kubectl's instance passes the API server, and its provision fails.
	s.Instance("k-1", limited, "")
	failed := s.WaitInstance("k-1", "failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
	assert.Contains(t, failed.Status.Description, `plan "limited" allows at most 2 instances, and 2 exist`)
	var cm corev1.ConfigMap
	err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "k-1-db"}, &cm)
	assert.True(t, apierrors.IsNotFound(err), "nothing of k-1 applied: %v", err)

	// A deprovision makes room; the failed instance still holds one
	// place until it is deleted.
	s.Expect(http.MethodDelete, fmt.Sprintf("/v2/service_instances/p-1?service_id=%s&plan_id=%s", s.ServiceID, limited), "", http.StatusOK, `{}`)
	refused("/v2/service_instances/p-3", provision("p-3", limited, org("p-3")), `and 2 exist`)
	require.NoError(t, s.Kube.Client.Delete(ctx, failed))
	s.WaitGone(failed)
	s.Expect(http.MethodPut, "/v2/service_instances/p-3", provision("p-3", limited, org("p-3")), http.StatusCreated, `{}`)

	// A move onto the full plan counts as a provision: OSB's update is
	// refused, kubectl's fails, and the instance stays on its plan.
	s.Expect(http.MethodPut, "/v2/service_instances/m-1", provision("m-1", open, org("m-1")), http.StatusCreated, `{}`)
	code, got, _ := s.Do(http.MethodPatch, "/v2/service_instances/m-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, limited), nil)
	assert.Equal(t, http.StatusForbidden, code, "PATCH onto the full plan: %s", got)
	assert.Contains(t, got, `plan \"limited\" allows at most 2 instances, and 2 exist`)
	moving := s.Instance("k-2", open, "")
	s.WaitInstance(moving.Name, "succeeded", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Patch(ctx, moving, ctrlclient.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"planId":%q}}`, limited))))
	movedOnto := s.WaitInstance(moving.Name, "its update failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
	assert.Contains(t, movedOnto.Status.Description, `plan "limited" allows at most 2 instances, and 2 exist`)
	assert.Equal(t, open, movedOnto.Status.AppliedSpec.PlanID, "still on its plan")

	// An organization's limit.
	s.Expect(http.MethodPut, "/v2/service_instances/o-1", provision("o-1", open, orgA), http.StatusCreated, `{}`)
	refused("/v2/service_instances/o-2", provision("o-2", open, orgA), `organization \"org-a\" allows at most 1 instance, and 1 exists`)
	shop := `"context": {"platform": "kubernetes", "namespace": "shop"}, ` + org("cluster-1")
	s.Expect(http.MethodPut, "/v2/service_instances/o-3", provision("o-3", open, shop), http.StatusCreated, `{}`)
	refused("/v2/service_instances/o-4", provision("o-4", open, shop), `organization \"shop\" allows at most 1 instance`)

	// A namespace's annotation. The quota counts every instance the API
	// server holds, one being deleted too (p-1's may still be going): the
	// limit is set once none is.
	var list osbv1alpha1.SFServiceInstanceList
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)))
		for _, i := range list.Items {
			assert.Nil(c, i.DeletionTimestamp, "instance %s is being deleted", i.Name)
		}
	}, time.Minute, 50*time.Millisecond, "no instance is being deleted")
	limit := len(list.Items) + 1
	annotate(t, s, fmt.Sprint(limit))
	quota := waitQuota(t, s, limit)
	assert.Equal(t, "quartermaster", quota.Labels["app.kubernetes.io/managed-by"])

	s.Instance("n-1", open, "") // the last place
	_, err = s.CreateInstance("n-2", open, "")
	require.Error(t, err, "the API server refuses one more")
	assert.True(t, apierrors.IsForbidden(err), "403: %v", err)
	assert.Contains(t, err.Error(), "exceeded quota: "+starter.InstanceQuotaName)
	refused("/v2/service_instances/n-3", provision("n-3", open, org("org-n")),
		`instance \"n-3\" would exceed its namespace's limit`)

	// Without the annotation the quota goes, and instances are made again.
	annotate(t, s, "")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var q corev1.ResourceQuota
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: starter.InstanceQuotaName}, &q)
		assert.True(c, apierrors.IsNotFound(err), "the quota is deleted: %v", err)
	}, 30*time.Second, 50*time.Millisecond)
	s.Instance("n-2", open, "")
}

// annotate sets the System's namespace's instance limit ("" removes it).
func annotate(t *testing.T, s *testenv.System, value string) {
	t.Helper()
	ctx := context.Background()
	var ns corev1.Namespace
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: s.Namespace}, &ns))
	base := ns.DeepCopy()
	if value == "" {
		delete(ns.Annotations, starter.MaxInstancesAnnotation)
	} else {
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[starter.MaxInstancesAnnotation] = value
	}
	require.NoError(t, s.Kube.Client.Patch(ctx, &ns, ctrlclient.MergeFrom(base)))
}

// waitQuota waits until the watcher's quota of limit instances is in force:
// written, and its use counted by the quota controller (before that, the
// API server refuses every create it constrains).
func waitQuota(t *testing.T, s *testenv.System, limit int) *corev1.ResourceQuota {
	t.Helper()
	var q corev1.ResourceQuota
	name := corev1.ResourceName("count/sfserviceinstances.osb.servicefabrik.io")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: starter.InstanceQuotaName}, &q))
		want := resource.NewQuantity(int64(limit), resource.DecimalSI)
		assert.True(c, q.Spec.Hard[name].Equal(*want), "spec.hard %v", q.Spec.Hard)
		assert.True(c, q.Status.Hard[name].Equal(*want), "status.hard %v", q.Status.Hard)
		_, counted := q.Status.Used[name]
		assert.True(c, counted, "status.used %v", q.Status.Used)
	}, 30*time.Second, 50*time.Millisecond, "the instance quota is in force")
	return &q
}
