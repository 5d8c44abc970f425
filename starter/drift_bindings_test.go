package starter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestDriftOfBindings: a binding's objects are checked as its instance's
// are. With repair, a binding's login deleted behind Quartermaster's back
// is applied again by a Repair run under the binding's own workflow ID,
// with the password it was bound with (its registry keeps it, so the
// credentials the platform holds still work) and its credentials Secret
// not written; with report, another binding's password edited is recorded
// on the binding (condition Drifted, an Event) and left as it is.
func TestDriftOfBindings(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	repairs := s.Plan("drift-repair", "  drift: {every: 2s, action: repair}\n", testenv.Templates("drift"))
	reports := s.Plan("drift-report", "  drift: {every: 2s}\n", testenv.Templates("drift"))
	for name, plan := range map[string]string{"bi-r": repairs, "bi-p": reports} {
		s.Instance(name, plan, "")
		s.WaitInstance(name, "provisioned", testenv.Succeeded(1))
	}
	waitLoopsCount(t, s, "bi-r", "bi-p")
	repaired := s.Bind("br", "bi-r", repairs)
	s.Bind("bp", "bi-p", reports)
	var record corev1.Secret
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: drift.SecretName(lifecycle.KindBinding, "br")}, &record))
	rec, err := drift.Decode(record.Data)
	require.NoError(t, err)
	require.Len(t, rec.Objects, 1, "the binding's login is recorded, apart from its instance's objects")
	assert.Equal(t, "br-login", rec.Objects[0].GetName())
	bound := login(t, s, "br")
	credentials := secretVersion(t, s, repaired.Status.Response.SecretRef)

	// Drift behind Quartermaster's back.
	require.NoError(t, s.Kube.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "br-login"}}))
	edited := login(t, s, "bp")
	base := edited.DeepCopy()
	edited.Data["password"] = "guessed"
	require.NoError(t, s.Kube.Client.Patch(ctx, edited, ctrlclient.MergeFrom(base), ctrlclient.FieldOwner("kubectl-edit")))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "br-login"}, &cm), "the login is back")
		assert.Equal(c, bound.Data, cm.Data, "with the user and password it was bound with")
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceBinding{}, "br")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionFalse, cond.Status)
		assert.Equal(c, "Repaired", cond.Reason)
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "br repaired")
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: s.Namespace, Name: "br"})
	repairRun := s.ClosedRun(id, runs.RepairType)
	var result workflows.RepairResult
	require.NoError(t, s.Temporal.GetWorkflow(ctx, id, repairRun).Get(ctx, &result))
	assert.Equal(t, osbv1alpha1.StateSucceeded, result.State)
	assert.Equal(t, "ConfigMap "+s.Namespace+"/br-login: deleted", result.Repaired)
	events := strings.Join(eventMessages(t, s, "SFServiceBinding", "br", "Repaired"), "\n")
	assert.Contains(t, events, "repaired by run "+repairRun+": ConfigMap "+s.Namespace+"/br-login: deleted")
	assert.Equal(t, credentials, secretVersion(t, s, repaired.Status.Response.SecretRef), "the credentials the platform was given are not written again")
	recorded(t, s.History(id, repairRun), "repair-binding")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceBinding{}, "bp")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionTrue, cond.Status)
		assert.Equal(c, "Drifted", cond.Reason)
		assert.Equal(c, "ConfigMap "+s.Namespace+"/bp-login: data.password changed", cond.Message)
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "bp reported")
	assert.Contains(t, eventMessages(t, s, "SFServiceBinding", "bp", "Drifted"), "ConfigMap "+s.Namespace+"/bp-login: data.password changed")
	assert.Never(t, func() bool {
		var cm corev1.ConfigMap
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "bp-login"}, &cm)
		return err != nil || cm.Data["password"] != "guessed"
	}, 2*driftEvery, 50*time.Millisecond, "a report repairs nothing")
	assert.Equal(t, 1, s.Runs(t, runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: s.Namespace, Name: "bp"})),
		"bp's bind alone: no Repair run")

	// The loop of the binding's instance shows what it found, in the UI.
	v, err := s.Temporal.QueryWorkflow(ctx, runs.DriftChecksID(drift.Shard(s.Namespace, "bi-p")), "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	assert.Contains(t, md.GetCurrentDetails(), "binding "+s.Namespace+"/bp: ConfigMap "+s.Namespace+"/bp-login: data.password changed")
}

// TestDriftOfARotatedBindingIsReported: a binding that rotated from a
// predecessor rendered its templates with it; once the predecessor is
// unbound, a render would not be the one the binding applied, so its drift
// is reported, saying why, and not repaired, though its plan says repair.
func TestDriftOfARotatedBindingIsReported(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("drift-rotatable", "  bindingRotatable: true\n  drift: {every: 2s, action: repair}\n", testenv.Templates("drift"))
	s.Instance("bi-o", plan, "")
	s.WaitInstance("bi-o", "provisioned", testenv.Succeeded(1))
	old := s.Bind("old", "bi-o", plan)
	next := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "next"},
		Spec: osbv1alpha1.SFServiceBindingSpec{ID: "next", InstanceID: "bi-o", ServiceID: old.Spec.ServiceID, PlanID: plan, PredecessorBinding: "old"}}
	require.NoError(t, s.Kube.Client.Create(ctx, next))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var b osbv1alpha1.SFServiceBinding
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(next), &b))
		assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State)
	}, time.Minute, 50*time.Millisecond, "the rotation is bound")
	require.NoError(t, s.Kube.Client.Delete(ctx, old))
	s.WaitGone(old)

	waitLoopsCount(t, s, "bi-o")
	require.NoError(t, s.Kube.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "next-login"}}))
	want := "ConfigMap " + s.Namespace + "/next-login: deleted; not repaired: it rotated from binding old, which is gone, and its templates would not render what they applied then"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceBinding{}, "next")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionTrue, cond.Status)
		assert.Equal(c, "Drifted", cond.Reason)
		assert.Equal(c, want, cond.Message)
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "next reported")
	assert.Contains(t, eventMessages(t, s, "SFServiceBinding", "next", "Drifted"), want)
	assert.Never(t, func() bool {
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "next-login"}, &corev1.ConfigMap{})
		return err == nil
	}, 2*driftEvery, 50*time.Millisecond, "nothing is applied again")
	assert.Equal(t, 1, s.Runs(t, runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindBinding, Namespace: s.Namespace, Name: "next"})),
		"next's bind alone: no Repair run")
}

// login is the ConfigMap <binding>-login of the drift templates' binding.
func login(t *testing.T, s *testenv.System, binding string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: binding + "-login"}, &cm))
	return &cm
}

// secretVersion is the resourceVersion of the Secret name: any write
// changes it.
func secretVersion(t *testing.T, s *testenv.System, name string) string {
	t.Helper()
	require.NotEmpty(t, name)
	var secret corev1.Secret
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &secret))
	return secret.ResourceVersion
}
