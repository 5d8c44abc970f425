package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestPlanReadiness: kubectl get sfplans says whether a plan can work, as
// soon as it is registered.
func TestPlanReadiness(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	ready := func(name string) *osbv1alpha1.SFPlan {
		t.Helper()
		var plan osbv1alpha1.SFPlan
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &plan))
			assert.Equal(c, plan.Generation, plan.Status.ObservedGeneration)
			assert.NotNil(c, meta.FindStatusCondition(plan.Status.Conditions, "Ready"))
		}, 30*time.Second, 20*time.Millisecond, "plan %s gets a Ready condition", name)
		return &plan
	}

	s.Plan("good", "", testenv.Templates("gated-password"))
	good := ready("good")
	cond := meta.FindStatusCondition(good.Status.Conditions, "Ready")
	assert.Equal(t, "True", string(cond.Status))
	// The spec's digest, as Service Fabrik records it, follows the spec.
	require.Len(t, good.Status.SpecHash, 32)
	hash := good.Status.SpecHash
	require.NoError(t, s.Kube.Client.Patch(ctx, good, ctrlclient.RawPatch(types.MergePatchType, []byte(`{"spec": {"description": "changed"}}`))))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(good), good))
		assert.Equal(c, good.Generation, good.Status.ObservedGeneration)
		assert.NotEqual(c, hash, good.Status.SpecHash)
	}, 30*time.Second, 20*time.Millisecond, "a new spec has a new digest")

	s.Plan("broken", "", `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      data: {size: {{ .instance.spec.parameters.size | required }}}
`)
	cond = meta.FindStatusCondition(ready("broken").Status.Conditions, "Ready")
	assert.Equal(t, "False", string(cond.Status))
	assert.Equal(t, "InvalidTemplate", cond.Reason)
	assert.Equal(t, `provision template: template: provision:3: function "required" not defined`, cond.Message)

	// IDs are the cluster's: each run of the test has its own.
	later := s.Namespace + "-later"
	orphan := testenv.Decode(t, fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: orphan}
spec: {name: orphan, id: %s-orphan, description: d, serviceId: %s}
`, s.Namespace, later))
	orphan.SetNamespace(s.Namespace)
	require.NoError(t, s.Kube.Client.Create(ctx, orphan))
	cond = meta.FindStatusCondition(ready("orphan").Status.Conditions, "Ready")
	assert.Equal(t, "UnknownService", cond.Reason)

	svc := testenv.Decode(t, fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {name: late}
spec: {name: late, id: %s, description: registered after its plan, bindable: false}
`, later))
	svc.SetNamespace(s.Namespace)
	require.NoError(t, s.Kube.Client.Create(ctx, svc))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var plan osbv1alpha1.SFPlan
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "orphan"}, &plan))
		assert.True(c, meta.IsStatusConditionTrue(plan.Status.Conditions, "Ready"))
	}, 30*time.Second, 20*time.Millisecond, "the plan becomes Ready when its service is registered")
	var got osbv1alpha1.SFService
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "late"}, &got))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "late"}, &got))
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, "Ready"))
	}, 30*time.Second, 20*time.Millisecond, "the service is Ready")
}
