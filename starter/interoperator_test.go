package starter_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

var (
	dockerKind     = schema.GroupVersionKind{Group: "deployment.servicefabrik.io", Version: "v1alpha1", Kind: "Docker"}
	dockerBindKind = schema.GroupVersionKind{Group: "bind.servicefabrik.io", Version: "v1alpha1", Kind: "DockerBind"}
)

// TestInterOperatorStylePlan: a plan written for the Service Fabrik
// inter-operator (testenv's "interoperator-docker": a sources template
// whose binding source has an empty name for an instance, a status
// template that renders every operation's section each time) goes through
// provision, bind, unbind and deprovision on the real servers. The test
// plays the docker operator: it sets the status of the objects the plan
// applies.
func TestInterOperatorStylePlan(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	s.InstallCRD("docker")
	s.InstallCRD("dockerbind")
	planID := s.Plan("docker", "  bindable: true\n", testenv.Templates("interoperator-docker"))

	// Provision: the Docker object is applied; the instance waits for the
	// operator, and succeeds when it reports so.
	s.Instance("d-1", planID, `{"memory": "128m"}`)
	docker := waitObject(t, s, dockerKind, "d-1")
	assert.JSONEq(t, `{"plan_id": "`+planID+`", "parameters": {"memory": "128m"}}`, docker.Object["spec"].(map[string]any)["options"].(string))
	inst := s.WaitInstance("d-1", "waiting for the operator", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress && len(i.Status.Resources) == 1
	})
	assert.Empty(t, inst.Status.Error)
	setStatus(t, s, docker, map[string]any{"state": "succeeded"})
	inst = s.WaitInstance("d-1", "provisioned", testenv.Succeeded(1))
	assert.Empty(t, inst.Status.Error, "the bind section's response, a message while no binding exists, is not read")

	// Bind: the DockerBind is applied; its operator's response, base64 JSON
	// in its status, becomes the credentials.
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "b-1", Namespace: s.Namespace},
		Spec:       osbv1alpha1.SFServiceBindingSpec{ID: "b-1", InstanceID: "d-1", ServiceID: s.ServiceID, PlanID: planID},
	}
	require.NoError(t, s.Kube.Client.Create(ctx, b))
	dockerBind := waitObject(t, s, dockerBindKind, "b-1")
	assert.Equal(t, "d-1", dockerBind.GetLabels()["instance_guid"])
	response := base64.StdEncoding.EncodeToString([]byte(`{"credentials": {"host": "d-1.docker", "port": 8080, "password": "pw"}}`))
	setStatus(t, s, dockerBind, map[string]any{"state": "succeeded", "response": response})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), b))
		assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State, "bind: %s", b.Status.Description)
	}, 60*time.Second, 50*time.Millisecond, "the binding succeeds")
	var creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: b.Status.Response.SecretRef}, &creds))
	assert.Equal(t, map[string][]byte{"host": []byte("d-1.docker"), "port": []byte("8080"), "password": []byte("pw")}, creds.Data)
	bindID := runs.WorkflowID(lifecycle.BindingTarget(b))
	var res workflows.Result
	require.NoError(t, s.Temporal.GetWorkflow(ctx, bindID, "").Get(ctx, &res))
	assert.Empty(t, res.Warnings, "every source of a binding's operation is named")

	// Unbind: the DockerBind goes, and with it the credentials.
	require.NoError(t, s.Kube.Client.Delete(ctx, b))
	s.WaitGone(b)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(dockerBind), dockerBind)))
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&creds), &creds)))

	// Deprovision: the Docker object goes, then the instance.
	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	s.WaitGone(inst)
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(docker), docker)))
}

// TestPlanOutputWarnings: output a plan's author likely got wrong, but
// that the operation does not need, is ignored with a warning: a Warning
// Event on the resource, and a line in the run's result.
func TestPlanOutputWarnings(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	planID := s.Plan("typo", "", `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}-db}
  - action: sources
    type: gotemplate
    content: |
      db: {apiVersion: v1, kind: ConfigMap, name: {{ .instance.metadata.name }}-db, nmaespace: elsewhere}
  - action: status
    type: gotemplate
    content: |
      provision: {state: {{ if .db }}succeeded{{ else }}in progress{{ end }}}`)
	s.Instance("w-1", planID, "")
	s.WaitInstance("w-1", "provisioned", testenv.Succeeded(1))

	const warning = "sources template: db.nmaespace is not a field of a source (apiVersion, kind, name, namespace), and is ignored"
	var events corev1.EventList
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.List(ctx, &events, ctrlclient.InNamespace(s.Namespace), ctrlclient.MatchingFields{"reason": "PlanOutput"}))
		require.Len(c, events.Items, 1)
		assert.Equal(c, corev1.EventTypeWarning, events.Items[0].Type)
		assert.Equal(c, "w-1", events.Items[0].InvolvedObject.Name)
		assert.Equal(c, warning, events.Items[0].Message)
	}, 10*time.Second, 50*time.Millisecond, "one Warning event on the instance")

	var res workflows.Result
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "w-1"})
	require.NoError(t, s.Temporal.GetWorkflow(ctx, id, "").Get(ctx, &res))
	assert.Equal(t, []string{warning}, res.Warnings)
}

// waitObject waits until the plan's object of kind gvk named name exists
// in the System's namespace, and returns it.
func waitObject(t *testing.T, s *testenv.System, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, obj))
	}, 30*time.Second, 50*time.Millisecond, "%s %s is applied", gvk.Kind, name)
	return obj
}

// setStatus writes an object's status, as its operator would.
func setStatus(t *testing.T, s *testenv.System, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	require.NoError(t, unstructured.SetNestedMap(obj.Object, status, "status"))
	require.NoError(t, s.Kube.Client.Status().Update(context.Background(), obj))
}
