package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestInstanceLifecycle provisions the tenant-namespace sample with kubectl's
// calls, updates it and deletes it, checking what a user would.
func TestInstanceLifecycle(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()

	s.Instance("team-a", testenv.TenantPlan, "")
	inst := s.WaitInstance("team-a", "provisioned", testenv.Succeeded(1))
	assert.Equal(t, "namespace "+nsOf(t, inst)+" is ready", inst.Status.Description)
	assert.NotNil(t, inst.Status.AppliedSpec)
	assert.Contains(t, inst.Finalizers, "quartermaster.io/deprovision")
	tenantNS := nsOf(t, inst)

	// The rendered objects exist; the one beside the instance is owned by the registry.
	var reg corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "qm-instance-team-a"}, &reg))
	var info corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "team-a-tenant"}, &info))
	require.Len(t, info.OwnerReferences, 1)
	assert.Equal(t, reg.UID, info.OwnerReferences[0].UID)
	assert.Equal(t, map[string]string{"namespace": tenantNS, "pods": "10"}, info.Data)
	var quota corev1.ResourceQuota
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: "tenant"}, &quota))
	assert.Equal(t, "10", quota.Spec.Hard.Pods().String())
	var role rbacv1.Role
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: "tenant-user"}, &role))
	var admin corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: "tenant-admin"}, &admin))
	password := string(admin.Data["password"])
	assert.Len(t, password, 24)
	assert.Equal(t, password, s.RegistryValue("qm-instance-team-a", "admin-password"), "the password lives in the registry")
	assert.Equal(t, "team-a", s.RegistryValue("qm-instance-team-a", "instance-id"))
	assert.Len(t, inst.Status.Resources, 6, "namespace, quota, role, rolebinding, secret, configmap")

	// Editing the parameters runs Update: re-rendered, same password.
	base := inst.DeepCopy()
	inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"pods": 20}`)}
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	inst = s.WaitInstance("team-a", "updated", testenv.Succeeded(2))
	assert.Equal(t, "quota of 20 pods", inst.Status.Description)
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: "tenant"}, &quota))
	assert.Equal(t, "20", quota.Spec.Hard.Pods().String())
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: "tenant-admin"}, &admin))
	assert.Equal(t, password, string(admin.Data["password"]), "an update does not make a second password")

	// Deleting it removes every object, then the instance.
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	for _, obj := range []ctrlclient.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "team-a-tenant"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "qm-instance-team-a"}},
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "tenant"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "tenant-admin"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "tenant-user"}},
	} {
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)
		assert.True(t, apierrors.IsNotFound(err), "%T %s/%s is deleted: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Name: tenantNS}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "the tenant namespace is gone, none left Terminating: %v", err)

	// The same instance again is provisioned at once, in the same namespace.
	s.Instance("team-a", testenv.TenantPlan, "")
	again := s.WaitInstance("team-a", "provisioned again", testenv.Succeeded(1))
	assert.Equal(t, tenantNS, nsOf(t, again))
}

// TestBindingLifecycle binds to a provisioned instance and unbinds again.
func TestBindingLifecycle(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	s.Instance("team-b", testenv.TenantPlan, "")
	inst := s.WaitInstance("team-b", "provisioned", testenv.Succeeded(1))
	tenantNS := nsOf(t, inst)

	b := s.Bind("app-1", "team-b", testenv.TenantPlan)
	require.NotEmpty(t, b.Status.Response.SecretRef)

	var creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: b.Status.Response.SecretRef}, &creds))
	password := s.RegistryValue("qm-instance-team-b", "admin-password")
	assert.Equal(t, map[string][]byte{
		"namespace":      []byte(tenantNS),
		"serviceAccount": []byte(serviceAccountOf(t, b)),
		"username":       []byte("admin"),
		"password":       []byte(password.(string)),
	}, creds.Data, "the credentials are what the status template's bind.response says")
	assert.Equal(t, map[string]any{
		"namespace": tenantNS, "serviceAccount": serviceAccountOf(t, b), "username": "admin", "password": password,
	}, s.RegistryValue("qm-binding-app-1", "credentials"), "and they are kept in the binding registry")
	var sa corev1.ServiceAccount
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: tenantNS, Name: serviceAccountOf(t, b)}, &sa))

	// The bind's history, as the Temporal API serves it, holds no secret:
	// not the generated password its credentials carry. (The namespace and
	// the service account are names, which histories hold.)
	bindID := runs.WorkflowID(lifecycle.BindingTarget(b))
	history := testenv.HistoryText(s.History(bindID, s.ClosedRun(bindID, runs.WorkflowType(lifecycle.OpBind))))
	assert.Contains(t, history, `{"kind":"SFServiceBinding","namespace":"`+s.Namespace+`","name":"app-1"}`, "the history's payloads are read decoded")
	assert.Contains(t, history, serviceAccountOf(t, b), "and so are the activities' results")
	require.Len(t, password, 24)
	assert.NotContains(t, history, password.(string), "the bind's history holds no password")

	require.NoError(t, s.Kube.Client.Delete(ctx, b))
	s.WaitGone(b)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&sa), &sa)), "unbind removed the service account")
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&creds), &creds)), "unbind removed the credentials")
	inst = s.WaitInstance("team-b", "untouched by the unbind", testenv.Succeeded(1))
	assert.Equal(t, osbv1alpha1.StateSucceeded, inst.Status.State)
}

// TestTemplateFailure: a template that does not render leaves the instance
// failed with the template error and its line; nothing is applied and
// nothing is retried.
func TestTemplateFailure(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	plan := s.Plan("broken", "", testenv.Templates("broken"))
	s.Instance("broken-1", plan, `{"size": "s"}`)
	inst := s.WaitInstance("broken-1", "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	assert.Contains(t, inst.Status.Description, `provision failed: provision template: template: provision:4: function "required" not defined`)
	assert.Empty(t, inst.Status.Resources, "nothing was applied")
	var cm corev1.ConfigMap
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "broken-1-broken"}, &cm)))

	// No retry: once the run has closed, it is the only one, and the state
	// holds.
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	s.ClosedRun(id, runs.WorkflowType(lifecycle.OpProvision))
	assert.Equal(t, 1, s.Runs(t, id))
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKeyFromObject(inst), inst))
	assert.Equal(t, osbv1alpha1.StateFailed, inst.Status.State)
	assert.EqualValues(t, 1, inst.Status.ObservedGeneration)

	s.Instance("unknown-plan", "no-such-plan", "")
	inst = s.WaitInstance("unknown-plan", "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	assert.Equal(t, `provision failed: unknown plan "no-such-plan": no SFPlan has this spec.id`, inst.Status.Description)
}

// TestTenReconcilesStartOneWorkflow drives starters directly, as repeated
// events for one resource would. Each reconcile is a fresh starter, which
// remembers nothing it started: only the workflow ID keeps a second run
// from starting.
func TestTenReconcilesStartOneWorkflow(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true})
	ctx := context.Background()
	plan := s.Plan("gated", "", testenv.Templates("gated-password"))
	inst := s.Instance("once", plan, "")
	reconcile := func() {
		t.Helper()
		st := &starter.Starter{Client: s.Kube.Client, Temporal: s.Temporal}
		_, err := st.ReconcileInstance(ctx, ctrl.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(inst)})
		require.NoError(t, err)
	}
	// controller-runtime never reconciles one key twice at once: the
	// reconciles of a repeated event come one after the other, racing only
	// the workflow they started.
	for range 10 {
		reconcile()
	}
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	first, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	s.WaitInstance("once", "waiting for its gate", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress
	})
	for range 10 {
		reconcile()
	}
	s.OpenGate("once", "gate")
	s.WaitInstance("once", "provisioned", testenv.Succeeded(1))
	for range 10 {
		reconcile()
	}
	// The latest run under the ID, read from Temporal's store rather than
	// its visibility index, is still the first.
	last, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	assert.Equal(t, first.WorkflowExecutionInfo.Execution.RunId, last.WorkflowExecutionInfo.Execution.RunId, "thirty reconciles, one workflow run")
	s.ClosedRun(id, runs.WorkflowType(lifecycle.OpProvision))
	assert.Equal(t, 1, s.Runs(t, id))
}

// TestWatcherAddsAMissingFinalizer covers clusters without the admission
// policies (Kubernetes < 1.36): the watcher adds the finalizer before it
// starts the provision.
func TestWatcherAddsAMissingFinalizer(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Sample: true})
	ctx := context.Background()
	inst := s.Instance("bare", testenv.TenantPlan, "")
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))))
	require.Empty(t, inst.Finalizers)

	st := &starter.Starter{Client: s.Kube.Client, Temporal: s.Temporal}
	_, err := st.ReconcileInstance(ctx, ctrl.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(inst)})
	require.NoError(t, err)
	inst = s.WaitInstance("bare", "provisioned", testenv.Succeeded(1))
	assert.Equal(t, []string{osbv1alpha1.InstanceFinalizer}, inst.Finalizers)
}

func nsOf(t *testing.T, inst *osbv1alpha1.SFServiceInstance) string {
	t.Helper()
	for _, r := range inst.Status.Resources {
		if r.Kind == "Namespace" {
			return r.Name
		}
	}
	t.Fatalf("instance %s lists no Namespace among %v", inst.Name, inst.Status.Resources)
	return ""
}

func serviceAccountOf(t *testing.T, b *osbv1alpha1.SFServiceBinding) string {
	t.Helper()
	for _, r := range b.Status.Resources {
		if r.Kind == "ServiceAccount" {
			return r.Name
		}
	}
	t.Fatalf("binding %s lists no ServiceAccount among %v", b.Name, b.Status.Resources)
	return ""
}

// TestStateDeleteRemovesTheInstance: a client of the inter-operator asks
// for a removal by writing "delete" into the status; the watcher deletes
// the instance, and Deprovision removes what it applied.
func TestStateDeleteRemovesTheInstance(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("doomed", plan, "")
	inst := s.WaitInstance("doomed", "provisioned", testenv.Succeeded(1))
	var cm corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "doomed-db"}, &cm))

	base := inst.DeepCopy()
	inst.Status.State = osbv1alpha1.StateDelete
	require.NoError(t, s.Kube.Client.Status().Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	s.WaitGone(inst)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&cm), &cm)), "the deprovision removed what the instance applied")
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 2, s.Runs(c, id), "provision, then deprovision")
	}, 10*time.Second, 100*time.Millisecond)
}

// TestSearchAttributesFindTheRun: the watcher sets the search attributes
// of each run it starts; visibility finds the run by every one of them.
func TestSearchAttributesFindTheRun(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("found-1", plan, "")
	s.WaitInstance("found-1", "provisioned", testenv.Succeeded(1))

	query := fmt.Sprintf(`QmKind = "SFServiceInstance" AND QmNamespace = %q AND QmName = "found-1" AND InstanceID = "found-1"`+
		` AND ServiceID = %q AND PlanID = %q AND Operation = "provision"`, s.Namespace, s.ServiceID, plan)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err)
		require.Len(c, resp.Executions, 1)
		assert.Equal(c, "sfserviceinstance/"+s.Namespace+"/found-1", resp.Executions[0].Execution.WorkflowId)
		assert.Equal(c, "Provision", resp.Executions[0].Type.Name)
	}, 30*time.Second, 100*time.Millisecond, "visibility finds the run by %s", query)
}

// TestStateUpdateRunsUpdate: a client that writes "update" into the status
// of an instance, as the inter-operator's do, gets an Update run.
func TestStateUpdateRunsUpdate(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("again-1", plan, "")
	inst := s.WaitInstance("again-1", "provisioned", testenv.Succeeded(1))
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	s.ClosedRun(id, runs.WorkflowType(lifecycle.OpProvision))

	base := inst.DeepCopy()
	inst.Status.State = osbv1alpha1.StateUpdate
	require.NoError(t, s.Kube.Client.Status().Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	s.ClosedRun(id, runs.WorkflowType(lifecycle.OpUpdate))
	s.WaitInstance("again-1", "updated", testenv.Succeeded(1))
	assert.Equal(t, 2, s.Runs(t, id), "the provision, then the update")
}

// TestDeprovisionUnbindsFirst: deleting an instance that has bindings with
// quartermaster.io/deprovision-in-use (as the OSB API deprovisions)
// unbinds each of them first, by its own Unbind run, and says so while it
// waits; then the instance goes, and nothing is left behind.
func TestDeprovisionUnbindsFirst(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("slow-unbind", "", testenv.Templates("gated-binding"))
	s.Instance("owner-1", plan, "")
	inst := s.WaitInstance("owner-1", "provisioned", testenv.Succeeded(1))
	s.OpenGate("owner-1", "bind-gate")
	var bindings []*osbv1alpha1.SFServiceBinding
	for _, name := range []string{"app-1", "app-2"} {
		bindings = append(bindings, s.Bind(name, "owner-1", plan))
	}

	base := inst.DeepCopy()
	metav1.SetMetaDataAnnotation(&inst.ObjectMeta, osbv1alpha1.DeprovisionInUseAnnotation, "true")
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitInstance("owner-1", "waiting for its bindings", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.Description == "waiting for 2 bindings to be unbound"
	})
	for _, b := range bindings {
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b))
		assert.NotNil(t, b.DeletionTimestamp, "binding %s is being unbound", b.Name)
	}

	s.OpenGate("owner-1", "unbind-gate")
	s.WaitGone(inst)
	for _, b := range bindings {
		s.WaitGone(b)
		id := runs.WorkflowID(lifecycle.BindingTarget(b))
		s.ClosedRun(id, runs.WorkflowType(lifecycle.OpUnbind))
		var creds corev1.Secret
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "qm-credentials-" + b.Name}, &creds)
		assert.True(t, apierrors.IsNotFound(err), "the credentials of %s are gone", b.Name)
	}
	var cm corev1.ConfigMap
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "owner-1-db"}, &cm)))
	id := runs.WorkflowID(lifecycle.InstanceTarget(inst))
	recorded(t, s.History(id, s.ClosedRun(id, runs.WorkflowType(lifecycle.OpDeprovision))), "deprovision-unbinds-first")
}
