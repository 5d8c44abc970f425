package starter_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/workflows"
)

var record = flag.Bool("record", false, "record the gated provision's history into workflows/testdata for the replay test")

// gatedPlan provisions a ConfigMap with a generated password, and reports
// success only once a "gate" ConfigMap exists: the test decides when the
// provision may finish.
const gatedPlan = `
  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ .instance.metadata.name }}-db
        labels: {app: gated}
      data:
        password: {{ generatePassword "password" 16 }}
  - action: sources
    type: gotemplate
    content: |
      gate:
        apiVersion: v1
        kind: ConfigMap
        name: {{ .instance.metadata.name }}-gate
  - action: status
    type: gotemplate
    content: |
      provision:
        state: {{ if .gate }}succeeded{{ else }}in progress{{ end }}
        description: {{ if .gate }}open{{ else }}waiting for the gate{{ end }}
`

// TestWorkerRestartMidProvision stops the worker after the objects are
// applied and before the status says succeeded, and starts another: the
// workflow finishes, with no duplicate objects and no second password.
func TestWorkerRestartMidProvision(t *testing.T) {
	s := start(t, true)
	ctx := context.Background()
	plan := s.plan("gated", gatedPlan)
	s.instance("restart-1", plan, "")
	inst := s.waitInstance("restart-1", "applied, waiting for the gate", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress && len(i.Status.Resources) == 1
	})
	assert.Equal(t, "waiting for the gate", inst.Status.Description, "what the status template says while it waits")
	password := s.registryValue("qm-instance-restart-1", "password")

	s.worker.Stop()
	gate := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "restart-1-gate", Namespace: s.ns}}
	require.NoError(t, s.kube.Client.Create(ctx, gate))
	time.Sleep(3 * time.Second)
	require.NoError(t, s.kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), inst))
	assert.Equal(t, osbv1alpha1.StateInProgress, inst.Status.State, "nothing moves without a worker")

	s.startWorker()
	inst = s.waitInstance("restart-1", "provisioned by the new worker", succeeded(1))
	assert.Equal(t, "open", inst.Status.Description)

	var cms corev1.ConfigMapList
	require.NoError(t, s.kube.Client.List(ctx, &cms, ctrlclient.InNamespace(s.ns), ctrlclient.MatchingLabels{"app": "gated"}))
	require.Len(t, cms.Items, 1, "no duplicate objects")
	assert.Equal(t, password, cms.Items[0].Data["password"], "no second password")
	assert.Equal(t, password, s.registryValue("qm-instance-restart-1", "password"))
	id := workflows.WorkflowID(activities.KindInstance, s.ns, "restart-1")
	assert.Equal(t, 1, s.runs(id), "one run carried over the restart")

	if *record {
		recordHistory(t, s.tc, id, filepath.Join("..", "workflows", "testdata", "provision-restart.json"))
	}
}

// TestConcurrentOperationIsRefused: the workflow ID is the lock. A second
// operation on an instance while one runs is refused by Temporal; the
// starter starts it once the running one is done.
func TestConcurrentOperationIsRefused(t *testing.T) {
	s := start(t, true)
	ctx := context.Background()
	plan := s.plan("gated", gatedPlan)
	s.instance("busy", plan, "")
	s.waitInstance("busy", "in progress", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateInProgress
	})
	id := workflows.WorkflowID(activities.KindInstance, s.ns, "busy")
	target := activities.Target{Kind: activities.KindInstance, Namespace: s.ns, Name: "busy"}

	_, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.TaskQueue,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, workflows.Update, target)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	require.ErrorAs(t, err, &started, "an Update while the Provision runs is refused")

	// The watcher sees a spec change meanwhile; its start is refused too.
	var inst osbv1alpha1.SFServiceInstance
	require.NoError(t, s.kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.ns, Name: "busy"}, &inst))
	base := inst.DeepCopy()
	inst.Spec.OrganizationGUID = "org-2"
	require.NoError(t, s.kube.Client.Patch(ctx, &inst, ctrlclient.MergeFrom(base)))
	time.Sleep(time.Second)
	assert.Equal(t, 1, s.runs(id), "still one run while the provision waits")

	// Once the provision finishes, the update the spec change asked for runs.
	require.NoError(t, s.kube.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "busy-gate", Namespace: s.ns}}))
	s.waitInstance("busy", "updated to generation 2", succeeded(2))
	require.Eventually(t, func() bool { return s.runs(id) == 2 }, 10*time.Second, 100*time.Millisecond, "provision, then update")
}

func recordHistory(t *testing.T, tc client.Client, id, path string) {
	t.Helper()
	iter := tc.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, raw, 0o644))
}
