package starter_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestKubectlParametersMeetThePlanSchema: an instance created with kubectl
// is held to the plan's parameter schema as an OSB request is. A violation
// fails it at once, naming the field as OSB's 400 does, and nothing is
// applied; an update that breaks the update schema fails the same way and
// leaves the instance as it was.
func TestKubectlParametersMeetThePlanSchema(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, Sample: true})
	ctx := context.Background()
	failed := func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed }

	s.Instance("too-big", testenv.KeyValuePlan, `{"replicas": 9}`)
	inst := s.WaitInstance("too-big", "failed", failed)
	assert.Equal(t, `provision failed: parameters do not match the service_instance create schema of plan "small": parameters/replicas: maximum: got 9, want 5`,
		inst.Status.Description)
	assert.Empty(t, inst.Status.Resources, "nothing is applied")
	err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "qm-instance-too-big"}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "no registry is made: %v", err)
	var deps appsv1.DeploymentList
	require.NoError(t, s.Kube.Client.List(ctx, &deps, ctrlclient.InNamespace(s.Namespace)))
	assert.Empty(t, deps.Items)

	s.Instance("fine", testenv.KeyValuePlan, `{"replicas": 1}`)
	inst = s.WaitInstance("fine", "provisioned", testenv.Succeeded(1))
	base := inst.DeepCopy()
	inst.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"replicas": 2, "color": "red"}`)}
	require.NoError(t, s.Kube.Client.Patch(ctx, inst, ctrlclient.MergeFrom(base)))
	inst = s.WaitInstance("fine", "update failed", failed)
	assert.Contains(t, inst.Status.Description, `update failed: parameters do not match the service_instance update schema of plan "small": parameters: additional properties 'color' not allowed`)
	var dep appsv1.Deployment
	name := s.RegistryValue("qm-instance-fine", "name").(string)
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &dep))
	assert.EqualValues(t, 1, *dep.Spec.Replicas, "the failed update changed nothing")
	require.NotNil(t, inst.Status.InstanceUsable)
	assert.True(t, *inst.Status.InstanceUsable)
}
