package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/internal/testenv"
)

// appDeployment is a user's Deployment named name with labels.
func appDeployment(s *testenv.System, name, labels string) string {
	return fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s, labels: {%s}}
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers: [{name: app, image: example.com/%s}]`, name, s.Namespace, labels, name, name, name)
}

// projectedInto says whether a Deployment's pod template carries the
// claim's credentials: the files under /bindings/<claim> and the variable.
func projectedInto(c require.TestingT, s *testenv.System, deployment, claim string) bool {
	var got appsv1.Deployment
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: deployment}, &got))
	d := got.Spec.Template
	mounts := d.Spec.Containers[0].VolumeMounts
	return len(mounts) == 1 && mounts[0].MountPath == "/bindings/"+claim &&
		mounts[0].Name == bindingusage.VolumeName(servicebinding.UsageName(claim)) &&
		assert.Contains(c, d.Spec.Containers[0].Env, corev1.EnvVar{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: claim}, Key: "password"}}})
}

// TestClaimProjectsIntoItsApplication: a claim as Primaza ships it
// (target.environmentTag, application.selector, envs) resolves and
// projects its credentials into the two Deployments its selector picks and
// not into a third; a label on the third brings it in; deleting the claim
// takes all three back, as the claim's falling back to Pending does until a
// service matches again. A claim that gives both target shapes is refused.
func TestClaimProjectsIntoItsApplication(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, HealthCheckMinute: checkMinute})
	ctx := context.Background()
	s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-credentials", "namespace": %q}, "stringData": {"password": "pw"}}`, s.Namespace))
	for name, labels := range map[string]string{"orders": "team: shop", "payments": "team: shop", "reports": "team: finance"} {
		s.Kube.Kubectl(t, appDeployment(s, name, labels), "apply", "-f", "-")
	}
	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	s.Create(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: shop-db, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}, {name: provider, value: aws}]
  serviceEndpointDefinitionKeys: [host, password]
  target: {environmentTag: dev}
  application:
    apiVersion: apps/v1
    kind: Deployment
    selector: {matchLabels: {team: shop}}
  envs: [{name: DB_PASSWORD, key: password}]`, s.Namespace))
	claim := waitClaim(t, s, "shop-db", primazav1alpha1.ClaimResolved, "db-1")
	assert.Equal(t, string(claim.UID), claim.Status.ClaimID, "the claim's ID, as Primaza writes it")
	// Held for the workloads a selector names, the service is listed in
	// the dev catalog's claimedByLabels (and no longer among its services).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var dev primazav1alpha1.ServiceCatalog
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "dev"}, &dev))
		assert.Empty(c, dev.Spec.Services)
		require.Len(c, dev.Spec.ClaimedByLabels, 1)
		assert.Equal(c, "db-1", dev.Spec.ClaimedByLabels[0].Name)
		assert.Equal(c, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}, dev.Spec.ClaimedByLabels[0].Labels)
	}, 30*time.Second, 50*time.Millisecond, "the dev catalog lists db-1 as claimed by labels")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		claim := getClaim(c, s, "shop-db")
		assert.Equal(c, 2, claim.Status.Projected)
		assert.True(c, meta.IsStatusConditionTrue(claim.Status.Conditions, "Projected"))
	}, 30*time.Second, 50*time.Millisecond, "the claim says it is projected into two workloads")
	for _, name := range []string{"orders", "payments"} {
		assert.True(t, projectedInto(t, s, name, "shop-db"), name)
	}
	var reports appsv1.Deployment
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "reports"}, &reports))
	assert.Empty(t, reports.Spec.Template.Spec.Volumes, "the third Deployment is not the claim's application")

	// A label brings the third in.
	s.Kube.Kubectl(t, "", "label", "deployment", "reports", "team=shop", "--overwrite", "-n", s.Namespace)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, projectedInto(c, s, "reports", "shop-db"))
		assert.Equal(c, 3, getClaim(c, s, "shop-db").Status.Projected)
	}, 30*time.Second, 50*time.Millisecond, "the newly matching Deployment is projected into")

	// The claimed service goes: the claim falls back to Pending, and the
	// credentials are taken back until a service matches again.
	userOf := func(c *assert.CollectT, name string) {
		var d appsv1.Deployment
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &d))
		assert.Empty(c, d.Spec.Template.Spec.Volumes, name)
		assert.Empty(c, d.Spec.Template.Spec.Containers[0].Env, name)
	}
	require.NoError(t, s.Kube.Client.Delete(ctx, getService(t, s, "db-1")))
	waitClaim(t, s, "shop-db", primazav1alpha1.ClaimPending, "")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		claim := getClaim(c, s, "shop-db")
		assert.Equal(c, 0, claim.Status.Projected)
		cond := meta.FindStatusCondition(claim.Status.Conditions, "Projected")
		require.NotNil(c, cond)
		assert.Equal(c, "NotResolved", cond.Reason)
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "shop-db"}, &sbv1.ServiceBinding{})
		assert.True(c, apierrors.IsNotFound(err), "the claim's ServiceBinding is gone: %v", err)
		for _, name := range []string{"orders", "payments", "reports"} {
			userOf(c, name)
		}
	}, 30*time.Second, 50*time.Millisecond, "a Pending claim projects nothing")
	dbService(t, s, "db-1", "psqlserver", "db-1.example")
	waitClaim(t, s, "shop-db", primazav1alpha1.ClaimResolved, "db-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 3, getClaim(c, s, "shop-db").Status.Projected)
	}, 30*time.Second, 50*time.Millisecond, "resolved again, it projects again")

	// Both target shapes: refused, with the reason.
	_, err := s.TryCreate(fmt.Sprintf(`
apiVersion: primaza.io/v1alpha1
kind: ServiceClaim
metadata: {name: both, namespace: %s}
spec:
  serviceClassIdentity: [{name: type, value: psqlserver}]
  serviceEndpointDefinitionKeys: [host]
  environmentTag: dev
  target: {environmentTag: dev}`, s.Namespace))
	require.ErrorContains(t, err, "give exactly one of target (as Primaza ships it), environmentTag or applicationClusterContext")

	// Deleting the claim takes the credentials back from all three.
	require.NoError(t, s.Kube.Client.Delete(ctx, getClaim(t, s, "shop-db")))
	s.WaitGone(&primazav1alpha1.ServiceClaim{ObjectMeta: metaName(s.Namespace, "shop-db")})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"orders", "payments", "reports"} {
			userOf(c, name)
		}
	}, 30*time.Second, 50*time.Millisecond, "every Deployment is the user's again")
}
