package starter_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/drift"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// driftEvery is the test plans' period: short, so that "within one
// period" is seconds.
const driftEvery = 2 * time.Second

// TestDriftRepairedAndReported: with action repair, a deleted Service and a
// Deployment scaled to zero behind Quartermaster's back are applied again
// by a Repair run of their own, with condition Drifted, Events and the
// metric saying what was done; with report, the same drift is recorded and
// left as it is. An instance that did not drift is not written to (its
// Secret, written as stringData, which the server keeps as data, among
// its objects).
func TestDriftRepairedAndReported(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	repairs := s.Plan("drift-repair", "  drift: {every: 2s, action: repair}\n", testenv.Templates("drift"))
	reports := s.Plan("drift-report", "  drift: {every: 2s}\n", testenv.Templates("drift"))
	for name, plan := range map[string]string{"r-1": repairs, "p-1": reports, "q-1": repairs} {
		s.Instance(name, plan, "")
	}
	for _, name := range []string{"r-1", "p-1", "q-1"} {
		s.WaitInstance(name, "provisioned", testenv.Succeeded(1))
		var record corev1.Secret
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: drift.SecretName(lifecycle.KindInstance, name)}, &record))
		assert.Equal(t, drift.SecretType, record.Type)
		rec, err := drift.Decode(record.Data)
		require.NoError(t, err)
		assert.Len(t, rec.Objects, 3, "the Deployment, the Service and the Secret are recorded")
	}
	waitLoopsCount(t, s, "r-1", "p-1", "q-1")
	reportsBefore, repairsBefore := driftCount(t, "report"), driftCount(t, "repair")

	// The quiet instance: nothing of it is written from here on.
	quiet := resourceVersions(t, s, "q-1")

	// Drift behind Quartermaster's back, as kubectl would.
	for _, name := range []string{"r-1", "p-1"} {
		require.NoError(t, s.Kube.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}))
		scale(t, s, name, 0)
	}

	// Repaired within a period (and the time a Repair run takes).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var svc corev1.Service
		assert.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "r-1"}, &svc), "the Service is back")
		var d appsv1.Deployment
		require.NoError(c, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "r-1"}, &d))
		assert.Equal(c, ptr.To[int32](2), d.Spec.Replicas, "the replicas are back")
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceInstance{}, "r-1")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionFalse, cond.Status)
		assert.Equal(c, "Repaired", cond.Reason)
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "r-1 repaired")
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "r-1"})
	repairRun := s.ClosedRun(id, runs.RepairType)
	var result workflows.RepairResult
	require.NoError(t, s.Temporal.GetWorkflow(ctx, id, repairRun).Get(ctx, &result))
	assert.Equal(t, osbv1alpha1.StateSucceeded, result.State)
	repaired := strings.Join(eventMessages(t, s, "SFServiceInstance", "r-1", "Repaired"), "\n")
	assert.Contains(t, repaired, "Service "+s.Namespace+"/r-1: deleted", "the Event names the deleted object")
	assert.Contains(t, repaired, "Deployment "+s.Namespace+"/r-1: spec.replicas changed", "and the changed field")
	assert.Contains(t, repaired, "repaired by run ", "and the run")
	recorded(t, s.History(id, repairRun), "repair")

	// Reported, and left as it is for a whole period and more.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceInstance{}, "p-1")
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionTrue, cond.Status)
		assert.Equal(c, "Drifted", cond.Reason)
		assert.Equal(c, "Deployment "+s.Namespace+"/p-1: spec.replicas changed; Service "+s.Namespace+"/p-1: deleted", cond.Message)
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "p-1 reported")
	assert.Contains(t, eventMessages(t, s, "SFServiceInstance", "p-1", "Drifted"), "Deployment "+s.Namespace+"/p-1: spec.replicas changed; Service "+s.Namespace+"/p-1: deleted")
	assert.Never(t, func() bool {
		var d appsv1.Deployment
		err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "p-1"}, &d)
		return err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 0
	}, 2*driftEvery, 50*time.Millisecond, "a report repairs nothing")
	assert.Equal(t, 1, s.Runs(t, runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "p-1"})),
		"p-1's provision alone: no Repair run")

	// Nothing was written of the quiet instance meanwhile: its own passes
	// ran beside the other two's.
	assert.Equal(t, quiet, resourceVersions(t, s, "q-1"), "no writes for an instance that did not drift")

	// The worker runs in this process: its counters are the registry's,
	// which the package's other drift tests count in too. Reported once,
	// not on every pass: a repeat is the same Event counted again (the
	// recorder's correlation), and counted in the metric beside it.
	assert.GreaterOrEqual(t, driftCount(t, "report")-reportsBefore, 1.0, "a report counted")
	assert.GreaterOrEqual(t, driftCount(t, "repair")-repairsBefore, 1.0, "a repair counted")
	assert.Equal(t, int32(1), eventCount(t, s, "SFServiceInstance", "p-1", "Drifted"), "reported once, not on every pass")

	// The loop shows what it found, in the UI.
	loop := runs.DriftChecksID(drift.Shard(s.Namespace, "p-1"))
	v, err := s.Temporal.QueryWorkflow(ctx, loop, "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	assert.Contains(t, md.GetCurrentDetails(), s.Namespace+"/p-1: Deployment "+s.Namespace+"/p-1: spec.replicas changed")
	recorded(t, s.History(loop, ""), "drift-checks")
}

// driftCount reads qm_drift_total{action} from the process's registry,
// which the worker of every System of the package counts in.
func driftCount(t *testing.T, action string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "qm_drift_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if testenv.Label(m, "action") == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// scale sets the replicas of the Deployment name as `kubectl scale` would:
// a write of another field manager.
func scale(t *testing.T, s *testenv.System, name string, replicas int32) {
	t.Helper()
	var d appsv1.Deployment
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &d))
	base := d.DeepCopy()
	d.Spec.Replicas = ptr.To(replicas)
	require.NoError(t, s.Kube.Client.Patch(context.Background(), &d, ctrlclient.MergeFrom(base), ctrlclient.FieldOwner("kubectl-scale")))
}

// resourceVersions are the versions of an instance, its record and its
// objects: any write changes one.
func resourceVersions(t *testing.T, s *testenv.System, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, obj := range map[string]ctrlclient.Object{
		"instance": &osbv1alpha1.SFServiceInstance{}, "deployment": &appsv1.Deployment{}, "service": &corev1.Service{},
	} {
		require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, obj))
		out[kind] = obj.GetResourceVersion()
	}
	var record, creds corev1.Secret
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: drift.SecretName(lifecycle.KindInstance, name)}, &record))
	out["record"] = record.ResourceVersion
	require.NoError(t, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name + "-creds"}, &creds))
	out["secret"] = creds.ResourceVersion
	return out
}

// driftCondition is the condition Drifted of obj (an instance or binding,
// a new object of its kind) named name (nil: none, or it could not be
// read, which c records).
func driftCondition(c *assert.CollectT, s *testenv.System, obj ctrlclient.Object, name string) *metav1.Condition {
	require.NoError(c, s.Kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, obj))
	return meta.FindStatusCondition(*osbv1alpha1.ConditionsOf(obj), osbv1alpha1.ConditionDrifted)
}

// waitLoopsCount waits until the drift-check loop of each instance's
// shard has made a pass that counted the shard's instances named here. A
// loop whose last pass found nothing to check waits a minute before its
// next (driftTickMax: a plan that starts asking for checks is served
// within it), and one that started before the test's instances existed
// may be in that wait. Once a pass has counted them, the loop passes every
// period of their plan, which "within a few periods" below relies on.
func waitLoopsCount(t *testing.T, s *testenv.System, instances ...string) {
	t.Helper()
	want := map[int]int{}
	for _, name := range instances {
		want[drift.Shard(s.Namespace, name)]++
	}
	counted := regexp.MustCompile(`checked of (\d+) instances`)
	var last atomic.Pointer[string] // what a loop said last, for the failure
	ok := assert.Eventually(t, func() bool {
		for shard, n := range want {
			v, err := s.Temporal.QueryWorkflow(context.Background(), runs.DriftChecksID(shard), "", "__temporal_workflow_metadata")
			if err != nil {
				msg := err.Error()
				last.Store(&msg)
				return false
			}
			var md sdkpb.WorkflowMetadata
			if err := v.Get(&md); err != nil {
				return false
			}
			details := md.GetCurrentDetails()
			last.Store(&details)
			m := counted.FindStringSubmatch(details)
			if m == nil {
				return false
			}
			if got, _ := strconv.Atoi(m[1]); got < n {
				return false
			}
		}
		return true
	}, time.Minute+30*time.Second, 200*time.Millisecond)
	if !ok {
		said := "nothing"
		if p := last.Load(); p != nil {
			said = *p
		}
		t.Fatalf("no drift-check pass counted %v; a loop said: %s", instances, said)
	}
}

// eventCount is how many times the Events of reason on the object
// kind/name were recorded: a repeat of one is counted on it.
func eventCount(t *testing.T, s *testenv.System, kind, name, reason string) int32 {
	t.Helper()
	var events corev1.EventList
	require.NoError(t, s.Kube.Client.List(context.Background(), &events, ctrlclient.InNamespace(s.Namespace)))
	var n int32
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}

// eventMessages are the messages of the Events of reason on the object
// kind/name (an instance or binding), once there is one (the recorder
// writes them on a goroutine of its own, after the status).
func eventMessages(t *testing.T, s *testenv.System, kind, name, reason string) []string {
	t.Helper()
	list := func() []string {
		var events corev1.EventList
		if err := s.Kube.Client.List(context.Background(), &events, ctrlclient.InNamespace(s.Namespace)); err != nil {
			return nil
		}
		var out []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
				out = append(out, e.Message)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(list()) > 0 }, 10*time.Second, 100*time.Millisecond, "Events %s on %s", reason, name)
	return list()
}

// TestDriftRecordIsTrustedForNothing: a record sits in its instance's
// namespace, where the instance's users may write. One edited to list
// another instance's Deployment (with a value that differs) and to name
// that instance's registry as its owner reveals nothing of it: the check
// knows the instance's own registry from the API server, and the other's
// objects are not the instance's.
func TestDriftRecordIsTrustedForNothing(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	// Repair, so that qm_drift_total{action="report"}, which
	// TestDriftRepairedAndReported counts exactly, is left alone.
	plan := s.Plan("drift-repair", "  drift: {every: 2s, action: repair}\n", testenv.Templates("drift"))
	for _, name := range []string{"forger", "victim"} {
		s.Instance(name, plan, "")
		s.WaitInstance(name, "provisioned", testenv.Succeeded(1))
	}
	record := func(name string) (*corev1.Secret, drift.Record) {
		var secret corev1.Secret
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: drift.SecretName(lifecycle.KindInstance, name)}, &secret))
		rec, err := drift.Decode(secret.Data)
		require.NoError(t, err)
		return &secret, rec
	}
	waitLoopsCount(t, s, "forger", "victim")
	forged, rec := record("forger")
	victimSecret, victim := record("victim")
	for _, obj := range victim.Objects {
		if obj.GetKind() == "Deployment" {
			o := obj.DeepCopy()
			require.NoError(t, unstructured.SetNestedField(o.Object, int64(7), "spec", "replicas"))
			rec.Objects = append(rec.Objects, *o)
		}
	}
	data, err := rec.Encode()
	require.NoError(t, err)
	forged.Data, forged.OwnerReferences = data, victimSecret.OwnerReferences
	require.NoError(t, s.Kube.Client.Update(ctx, forged))

	assert.Never(t, func() bool {
		var inst osbv1alpha1.SFServiceInstance
		if err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "forger"}, &inst); err != nil {
			return true
		}
		return meta.FindStatusCondition(inst.Status.Conditions, osbv1alpha1.ConditionDrifted) != nil
	}, 3*driftEvery, 50*time.Millisecond, "nothing of the victim's Deployment is checked for the forger")

	// The check does run for the forger: its own Service deleted is
	// repaired, and nothing else is named.
	require.NoError(t, s.Kube.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "forger"}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := driftCondition(c, s, &osbv1alpha1.SFServiceInstance{}, "forger")
		require.NotNil(c, cond)
		assert.Equal(c, "Repaired", cond.Reason)
		assert.Contains(c, cond.Message, ": Service "+s.Namespace+"/forger: deleted")
		assert.NotContains(c, cond.Message, "victim")
	}, 3*driftEvery+20*time.Second, 100*time.Millisecond, "the forger's own drift repaired")
}
