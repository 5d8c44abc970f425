package starter_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestHelmPlan: a plan whose provision template is a helm chart provisions
// through the worker: the instance succeeds, and the chart's objects exist
// with the request's parameters over the chart's defaults: those the plan's
// schema declares, at the paths it maps; a value the chart's author did not
// expose (quota) stays the chart's whatever the request says.
func TestHelmPlan(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	schema := `  schemas: {service_instance: {create: {parameters: {type: object, properties: {size: {type: string}}}}}}`
	plan := s.Plan("helm", schema, fmt.Sprintf(`
  - action: provision
    type: helm
    contentEncoded: %s`, base64.StdEncoding.EncodeToString(testenv.ChartArchive(t))))
	s.Instance("chart-1", plan, `{"size": "large", "quota": {"pods": "1000"}}`)
	inst := s.WaitInstance("chart-1", "provisioned", testenv.Succeeded(1))

	var cm corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "chart-1-tenant"}, &cm))
	assert.Equal(t, map[string]string{"size": "large", "plan": "helm", "instance": "chart-1"}, cm.Data)
	var quota corev1.ResourceQuota
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "chart-1-tenant"}, &quota))
	assert.Equal(t, "4", quota.Spec.Hard.Pods().String(), "the chart's default: the schema declares no quota")

	// A plan that exposes the quota as a parameter of its own name.
	mapped := s.Plan("helm-mapped", `  schemas: {service_instance: {create: {parameters: {type: object, properties: {
    podLimit: {type: string, x-quartermaster-values-path: quota.pods}}}}}}`, fmt.Sprintf(`
  - action: provision
    type: helm
    contentEncoded: %s`, base64.StdEncoding.EncodeToString(testenv.ChartArchive(t))))
	s.Instance("chart-2", mapped, `{"podLimit": "8", "size": "huge"}`)
	s.WaitInstance("chart-2", "provisioned", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "chart-2-tenant"}, &quota))
	assert.Equal(t, "8", quota.Spec.Hard.Pods().String(), "podLimit, at the path the schema maps it to")
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "chart-2-tenant"}, &cm))
	assert.Equal(t, "small", cm.Data["size"], "size is not this plan's parameter")
	assert.Len(t, inst.Status.Resources, 2)
	err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "upgraded"}, &cm)
	assert.True(t, apierrors.IsNotFound(err), "a provision is an install, not an upgrade")
}

// TestRefusedObjectFailsTheInstance: an object the API server refuses
// leaves the instance failed with the API server's own message, at once.
func TestRefusedObjectFailsTheInstance(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	plan := s.Plan("refused", "", testenv.Templates("refused"))
	s.Instance("refused-1", plan, "")
	inst := s.WaitInstance("refused-1", "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	assert.Contains(t, inst.Status.Description, "provision failed: applying ConfigMap "+s.Namespace+`/Not_A_Valid_Name: ConfigMap "Not_A_Valid_Name" is invalid: metadata.name: Invalid value: "Not_A_Valid_Name"`)
	assert.Empty(t, inst.Status.Resources)
}

// TestTemplateFromURLPlan: a gotemplate behind a url provisions through the
// worker; a plan version keeps the body it fetched, and a change to the
// plan fetches again.
func TestTemplateFromURLPlan(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	var suffix atomic.Value
	suffix.Store("first")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .instance.metadata.name }}-%s}\n", suffix.Load())
	}))
	defer srv.Close()
	planID := s.Plan("from-url", "", `
  - action: provision
    type: gotemplate
    url: `+srv.URL+`/provision.yaml`)

	s.Instance("u-1", planID, "")
	s.WaitInstance("u-1", "provisioned", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "u-1-first"}, &corev1.ConfigMap{}))

	suffix.Store("second")
	s.Instance("u-2", planID, "")
	s.WaitInstance("u-2", "provisioned", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "u-2-first"}, &corev1.ConfigMap{}),
		"the plan did not change: the body fetched for it stays")

	var p osbv1alpha1.SFPlan
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "from-url"}, &p))
	base := p.DeepCopy()
	p.Spec.Description = "a new version"
	require.NoError(t, s.Kube.Client.Patch(ctx, &p, ctrlclient.MergeFrom(base)))
	s.WaitPlanGeneration(planID, p.Generation)
	s.Instance("u-3", planID, "")
	s.WaitInstance("u-3", "provisioned", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "u-3-second"}, &corev1.ConfigMap{}),
		"a new plan version fetches again")
}
