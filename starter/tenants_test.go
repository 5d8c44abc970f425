package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/tenancy"
	"github.com/quartermaster/qm/internal/testenv"
)

// tenant is a user with edit rights in its own namespace and on
// Quartermaster's kinds there, and nothing else: what a platform gives
// each team.
type tenant struct {
	t      *testing.T
	ns     string
	client ctrlclient.Client
	admin  ctrlclient.Client
}

// newTenant makes the namespace, the user's grants, and the
// ServiceAccount its plans act as, with edit rights in the namespace (as
// the namespace's admin would grant it).
func newTenant(t *testing.T, s *testenv.System) *tenant {
	t.Helper()
	ns := s.Kube.Namespace(t)
	user := "tenant-of-" + ns
	ctx := context.Background()
	admin := s.Kube.Client
	// What the built-in edit role gives of the usual kinds (spelt out: it
	// is aggregated by kube-controller-manager, in its own time).
	edit := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "serviceaccounts", "pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: []string{"*"}},
	}
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "edit", Namespace: ns}, Rules: edit}))
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "quartermaster-user", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"osb.servicefabrik.io", "resource.servicefabrik.io", "primaza.io"},
			Resources: []string{"*"}, Verbs: []string{"*"}}}}))
	for _, b := range []struct{ name, kind, role string }{{"edit", "Role", "edit"}, {"quartermaster-user", "Role", "quartermaster-user"}} {
		require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	}
	require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenancy.DefaultServiceAccount, Namespace: ns}}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plans-edit", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenancy.DefaultServiceAccount, Namespace: ns}}}))
	cfg := rest.CopyConfig(s.Kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	return &tenant{t: t, ns: ns, client: c, admin: admin}
}

// create creates the manifest as the tenant, in its namespace.
func (tn *tenant) create(manifest string) *unstructured.Unstructured {
	tn.t.Helper()
	obj := testenv.Decode(tn.t, manifest)
	obj.SetNamespace(tn.ns)
	require.NoError(tn.t, tn.client.Create(context.Background(), obj), "the tenant creates %s %s", obj.GetKind(), obj.GetName())
	return obj
}

// offering registers, as the tenant, a service and a plan of the given
// IDs whose provision template is templates.
func (tn *tenant) offering(name, serviceID, planID, templates string) {
	tn.t.Helper()
	tn.create(fmt.Sprintf(`{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFService", "metadata": {"name": %q},
		"spec": {"name": %q, "id": %q, "description": "a tenant's", "bindable": true}}`, name, name, serviceID))
	tn.create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {name: %s}
spec:
  name: %s
  id: %s
  description: a tenant's plan
  serviceId: %s
  maximum_polling_duration: 30
  templates:
  - action: provision
    type: gotemplate
    content: |
%s`, name, name, planID, serviceID, indent(templates, "      ")))
}

// instance creates, as the tenant, an instance of the plan.
func (tn *tenant) instance(name, serviceID, planID, clusterID string) {
	tn.t.Helper()
	inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.ns},
		Spec: osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: serviceID, PlanID: planID, ClusterID: clusterID}}
	require.NoError(tn.t, tn.client.Create(context.Background(), inst))
}

// wait waits until the tenant's instance is in state, and returns it.
func (tn *tenant) wait(name string, state osbv1alpha1.OperationState) *osbv1alpha1.SFServiceInstance {
	tn.t.Helper()
	var inst osbv1alpha1.SFServiceInstance
	require.EventuallyWithT(tn.t, func(c *assert.CollectT) {
		require.NoError(c, tn.admin.Get(context.Background(), ctrlclient.ObjectKey{Namespace: tn.ns, Name: name}, &inst))
		assert.Equal(c, state, inst.Status.State, "description %q", inst.Status.Description)
	}, 60*time.Second, 50*time.Millisecond, "instance %s/%s is %s", tn.ns, name, state)
	return &inst
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix) + "\n"
}

// escalating renders what the tenant tried: a ClusterRole that
// may do everything, and a ConfigMap in a namespace that is not the
// instance's.
func escalating(victimNS string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "everything-{{ .instance.metadata.namespace }}-{{ .instance.metadata.name }}"}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: "planted-{{ .instance.metadata.name }}", namespace: %s}
data: {by: tenant}
`, victimNS)
}

// TestTenantsAreKeptApart: a tenant with edit rights in its namespace and
// on Quartermaster's kinds there tries, through Quartermaster, what it
// could not do itself. Each attempt is refused with a status or condition
// that says why, and nothing is written; the catalog's plan doing the
// same work still succeeds.
func TestTenantsAreKeptApart(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, API: true})
	ctx := context.Background()
	tn := newTenant(t, s)
	victim := s.Kube.Namespace(t) // stands for kube-system: nobody's namespace the tenant may write

	t.Run("a tenant's plan writes nothing outside its namespace", func(t *testing.T) {
		tn.t = t
		tn.offering("escalate", tn.ns+"-svc", tn.ns+"-escalate", escalating(victim))
		tn.instance("escalate", tn.ns+"-svc", tn.ns+"-escalate", "")
		inst := tn.wait("escalate", osbv1alpha1.StateFailed)
		assert.Contains(t, inst.Status.Description, "ClusterRole everything-"+tn.ns+"-escalate: it is cluster-scoped")
		var role rbacv1.ClusterRole
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: "everything-" + tn.ns + "-escalate"}, &role)
		assert.True(t, apierrors.IsNotFound(err), "no ClusterRole was made: %v", err)
		var cm corev1.ConfigMap
		err = s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: victim, Name: "planted-escalate"}, &cm)
		assert.True(t, apierrors.IsNotFound(err), "nothing was written into another namespace: %v", err)
	})

	t.Run("the catalog's plan doing the same work succeeds", func(t *testing.T) {
		planID := s.Plan("escalate", "", fmt.Sprintf("  - action: provision\n    type: gotemplate\n    content: |\n%s", indent(escalating(victim), "      ")))
		tn.t = t
		tn.instance("catalog", s.ServiceID, planID, "")
		tn.wait("catalog", osbv1alpha1.StateSucceeded)
		var role rbacv1.ClusterRole
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: "everything-" + tn.ns + "-catalog"}, &role))
		var cm corev1.ConfigMap
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: victim, Name: "planted-catalog"}, &cm))
		t.Cleanup(func() { _ = s.Kube.Client.Delete(context.Background(), &role) })
	})

	t.Run("a tenant's plan acts with its ServiceAccount's rights alone", func(t *testing.T) {
		tn.t = t
		// A Role the SA may not grant: edit cannot write roles at all.
		tn.offering("rbac", tn.ns+"-svc-rbac", tn.ns+"-rbac", `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: everything}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
`)
		tn.instance("rbac", tn.ns+"-svc-rbac", tn.ns+"-rbac", "")
		inst := tn.wait("rbac", osbv1alpha1.StateFailed)
		assert.Contains(t, inst.Status.Description, `"system:serviceaccount:`+tn.ns+`:`+tenancy.DefaultServiceAccount+`" cannot`)
	})

	t.Run("a plan ID a tenant repeats never shadows the catalog's", func(t *testing.T) {
		planID := s.Plan("shared", "", testenv.Templates("one-configmap"))
		tn.t = t
		tn.offering("copy", s.ServiceID, planID, escalating(victim))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var p osbv1alpha1.SFPlan
			require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tn.ns, Name: "copy"}, &p))
			ready := meta.FindStatusCondition(p.Status.Conditions, lifecycle.ConditionReady)
			require.NotNil(c, ready)
			assert.Equal(c, "ShadowsCatalog", ready.Reason)
			assert.Contains(c, ready.Message, "not served: the catalog's SFPlan "+s.Namespace+"/shared has spec.id")
		}, 30*time.Second, 50*time.Millisecond, "the tenant's copy says why it is not served")
		// Through OSB, the catalog plan still provisions.
		code, body, _ := s.Do(http.MethodPut, "/v2/service_instances/osb-shared?accepts_incomplete=true",
			fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`, s.ServiceID, planID), nil)
		assert.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, code, body)
		s.WaitInstance("osb-shared", "succeeded", testenv.Succeeded(1))
		// An instance of the ID in the tenant's namespace gets the catalog's plan.
		tn.instance("shared", s.ServiceID, planID, "")
		tn.wait("shared", osbv1alpha1.StateSucceeded)
		var cm corev1.ConfigMap
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: victim, Name: "planted-shared"}, &cm)
		assert.True(t, apierrors.IsNotFound(err), "the tenant's templates did not run: %v", err)
	})

	t.Run("a removal deletes only what the instance's applies made", func(t *testing.T) {
		tn.t = t
		foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-yours", Namespace: victim}, Data: map[string]string{"keep": "me"}}
		require.NoError(t, s.Kube.Client.Create(ctx, foreign))
		// A catalog plan's instance, which the worker removes with its own
		// rights: only the stamp keeps it from the foreign object.
		planID := s.Plan("plain", "", testenv.Templates("one-configmap"))
		tn.instance("plain", s.ServiceID, planID, "")
		inst := tn.wait("plain", osbv1alpha1.StateSucceeded)
		base := inst.DeepCopy()
		inst.Status.Resources = append(inst.Status.Resources, osbv1alpha1.Source{APIVersion: "v1", Kind: "ConfigMap", Name: "not-yours", Namespace: victim})
		require.NoError(t, tn.client.Status().Patch(ctx, inst, ctrlclient.MergeFrom(base)), "the tenant lists a foreign object in the status")
		require.NoError(t, tn.client.Delete(ctx, inst))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), &osbv1alpha1.SFServiceInstance{})
			assert.True(c, apierrors.IsNotFound(err), "the instance is removed: %v", err)
		}, 60*time.Second, 50*time.Millisecond)
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(foreign), foreign), "the foreign object is still there")
		assert.Equal(t, "me", foreign.Data["keep"])
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var events corev1.EventList
			require.NoError(c, s.Kube.Client.List(ctx, &events, ctrlclient.InNamespace(tn.ns)))
			found := false
			for _, e := range events.Items {
				found = found || e.Reason == "LeftNotOurs" && e.InvolvedObject.Name == "plain"
			}
			assert.True(c, found, "the removal says what it left")
		}, 30*time.Second, 50*time.Millisecond)
	})

	t.Run("an SFCluster outside the catalog namespaces is never used", func(t *testing.T) {
		tn.t = t
		marker := filepath.Join(t.TempDir(), "ran")
		kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: ["-c", "touch %s"], interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, marker)
		tn.create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "evil"}, "stringData": {"kubeconfig": %q}}`, kubeconfig))
		tn.create(`{"apiVersion": "resource.servicefabrik.io/v1alpha1", "kind": "SFCluster", "metadata": {"name": "evil"}, "spec": {"secretRef": "evil"}}`)
		tn.offering("plain", tn.ns+"-svc-plain", tn.ns+"-plain", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {a: b}\n")
		tn.instance("on-evil", tn.ns+"-svc-plain", tn.ns+"-plain", "evil")
		inst := tn.wait("on-evil", osbv1alpha1.StateFailed)
		assert.Contains(t, inst.Status.Description, "SFClusters are trusted only in the catalog namespaces")
		requireClusterCondition(t, s, tn.ns, "evil", "NotInCatalog", "is not used")

		// The same kubeconfig in the catalog namespace is refused for its exec.
		s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "exec", "namespace": %q}, "stringData": {"kubeconfig": %q}}`, s.Namespace, kubeconfig))
		s.Create(fmt.Sprintf(`{"apiVersion": "resource.servicefabrik.io/v1alpha1", "kind": "SFCluster", "metadata": {"name": "exec", "namespace": %q}, "spec": {"secretRef": "exec"}}`, s.Namespace))
		requireClusterCondition(t, s, s.Namespace, "exec", "UnsafeKubeconfig", "the kubeconfig sets exec (in user u)")
		_, err := os.Stat(marker)
		assert.True(t, os.IsNotExist(err), "the kubeconfig's command never ran: %v", err)
	})

	t.Run("a binding's response returns only its own credentials", func(t *testing.T) {
		planID := s.Plan("bindable", "", testenv.Templates("one-configmap"))
		s.Instance("bound", planID, "")
		s.WaitInstance("bound", "succeeded", testenv.Succeeded(1))
		b := s.Bind("b", "bound", planID)
		s.Create(fmt.Sprintf(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "someone-elses", "namespace": %q}, "stringData": {"password": "not-for-you"}}`, s.Namespace))
		base := b.DeepCopy()
		b.Status.Response.SecretRef = "someone-elses"
		require.NoError(t, s.Kube.Client.Status().Patch(ctx, b, ctrlclient.MergeFrom(base)))
		code, body, _ := s.Request(http.MethodGet, "/v2/service_instances/bound/service_bindings/b", "", nil)
		assert.Equal(t, http.StatusInternalServerError, code, body)
		assert.NotContains(t, body, "not-for-you")
	})
}

// requireClusterCondition waits until the SFCluster's Ready condition is
// False with reason, its message containing message.
func requireClusterCondition(t *testing.T, s *testenv.System, ns, name, reason, message string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var sfc resourcev1alpha1.SFCluster
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &sfc))
		ready := meta.FindStatusCondition(sfc.Status.Conditions, lifecycle.ConditionReady)
		require.NotNil(c, ready)
		assert.Equal(c, metav1.ConditionFalse, ready.Status)
		assert.Equal(c, reason, ready.Reason)
		assert.Contains(c, ready.Message, message)
	}, 30*time.Second, 50*time.Millisecond, "SFCluster %s/%s says %s", ns, name, reason)
}
