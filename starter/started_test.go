package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// TestUnreachableEngineShows: while the workflow engine cannot be reached,
// the watcher records why on the resource, once however often it retries,
// and the OSB last_operation says so; once the engine answers, the run
// starts and the condition says it did.
func TestUnreachableEngineShows(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true, Worker: true})
	ctx := context.Background()
	plan := s.Plan("instant", "  manager: {async: true}\n", testenv.Templates("instant"))
	s.Expect(http.MethodPut, "/v2/service_instances/waits?accepts_incomplete=true",
		fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, s.ServiceID, plan), http.StatusAccepted, "")
	key := ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "waits"}

	down, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer down.Close()
	reconcile := func(tc client.Client) error {
		st := &starter.Starter{Client: s.Kube.Client, Temporal: tc, TemporalAddress: "127.0.0.1:1"}
		_, err := st.ReconcileInstance(ctx, ctrl.Request{NamespacedName: key})
		return err
	}
	var inst osbv1alpha1.SFServiceInstance
	var written []string
	for range 3 {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st := &starter.Starter{Client: s.Kube.Client, Temporal: down, TemporalAddress: "127.0.0.1:1"}
		_, err := st.ReconcileInstance(ctx, ctrl.Request{NamespacedName: key})
		cancel()
		require.Error(t, err, "no run starts without the engine")
		require.NoError(t, s.Kube.Client.Get(context.Background(), key, &inst))
		c := meta.FindStatusCondition(inst.Status.Conditions, lifecycle.ConditionStarted)
		require.NotNil(t, c, "the watcher says why the request waits")
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, "EngineUnreachable", c.Reason)
		assert.Equal(t, "the workflow engine at 127.0.0.1:1 is unreachable; the provision starts once it answers", c.Message)
		written = append(written, c.LastTransitionTime.String()+"/"+inst.ResourceVersion)
	}
	assert.Equal(t, written[0], written[2], "written once, not per retry")
	s.ExpectSoon("/v2/service_instances/waits/last_operation", http.StatusOK,
		`{"state": "in progress", "description": "provision is queued: the workflow engine at 127.0.0.1:1 is unreachable; the provision starts once it answers"}`)

	require.NoError(t, reconcile(s.Temporal), "the engine answers again")
	s.WaitInstance("waits", "provisioned", testenv.Succeeded(1))
	require.NoError(t, s.Kube.Client.Get(ctx, key, &inst))
	assert.Nil(t, meta.FindStatusCondition(inst.Status.Conditions, lifecycle.ConditionStarted), "nothing waits any more")
}
