package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// plainPlan renders one ConfigMap and has no status template: a removal
// is done when the ConfigMap is gone.
const plainPlan = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .instance.metadata.name }}-db
        finalizers: [test.quartermaster.io/hold]
      data: {size: s}
`

// hold is the finalizer plainPlan's ConfigMap has, which keeps it, deleted,
// until the test lets it go.
const hold = "test.quartermaster.io/hold"

// TestRemovalWaitsAndDeletesAgain: a deprovision waits for what it deleted
// and says what holds it; an object written again after the delete (the
// apply of a worker that hung, resuming once its run was taken over) is
// deleted again, so that the removal still ends.
func TestRemovalWaitsAndDeletesAgain(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	planID := h.plan("plain", plainPlan)
	inst := h.sys.Instance("gone-1", planID, "")
	target := lifecycle.InstanceTarget(inst)
	val, err := h.run("ApplyTemplates", target, lifecycle.OpProvision)
	require.NoError(t, err)
	var refs []osbv1alpha1.Source
	require.NoError(t, val.Get(&refs))
	_, err = h.run("Finish", target, lifecycle.OpProvision, int64(1), activities.Outcome{State: osbv1alpha1.StateSucceeded}, refs)
	require.NoError(t, err)

	observe := func() activities.Outcome {
		t.Helper()
		val, err := h.run("Observe", target, lifecycle.OpDeprovision)
		require.NoError(t, err)
		var o activities.Outcome
		require.NoError(t, val.Get(&o))
		return o
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.sys.Namespace, Name: "gone-1-db"}}
	letGo := func() {
		t.Helper()
		require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(cm), cm))
		require.NotNil(t, cm.DeletionTimestamp, "the removal deleted it")
		base := cm.DeepCopy()
		cm.Finalizers = nil
		require.NoError(t, h.sys.Kube.Client.Patch(ctx, cm, ctrlclient.MergeFrom(base)))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(cm), &corev1.ConfigMap{}))
		}, 10*time.Second, 20*time.Millisecond)
	}

	_, err = h.run("RemoveResources", target, lifecycle.OpDeprovision)
	require.NoError(t, err)
	o := observe()
	assert.Equal(t, osbv1alpha1.StateInProgress, o.State)
	assert.Regexp(t, `^waiting for ConfigMap gone-1-db to go \(held by `+hold+`(, foregroundDeletion)?\)$`, o.Description)
	letGo()

	// Written again after the delete, as a resumed apply would: with the
	// instance's stamp.
	var reg corev1.Secret
	require.NoError(t, h.sys.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.sys.Namespace, Name: "qm-instance-gone-1"}, &reg))
	require.NoError(t, h.sys.Kube.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.sys.Namespace, Name: "gone-1-db", Finalizers: []string{hold},
			Annotations: map[string]string{apply.RenderedAnnotation: string(reg.UID) + "/1/1"}}, Data: map[string]string{"size": "s"}}))
	assert.Equal(t, activities.Outcome{State: osbv1alpha1.StateInProgress,
		Description: "waiting for ConfigMap gone-1-db to go"}, observe())
	letGo()
	assert.Equal(t, activities.Outcome{State: osbv1alpha1.StateSucceeded}, observe())
}
