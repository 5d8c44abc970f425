package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSelfCheckOnRealServers runs the SelfCheck workflow on the dev server
// built into bin/temporal, with a worker whose activity reads the real API
// server, and finds the run in visibility by its search attributes.
func TestSelfCheckOnRealServers(t *testing.T) {
	kube := testenv.Kubernetes(t)
	tc := testenv.Temporal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	require.NoError(t, worker.EnsureSearchAttributes(ctx, tc, "default"), "idempotent on a server that has them")

	w := worker.New(tc, kube.Client, nil)
	require.NoError(t, w.Start())
	defer w.Stop()

	defs, err := crds.Definitions()
	require.NoError(t, err)
	var want []string
	for _, d := range defs {
		want = append(want, d.Name)
	}

	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        "selfcheck/" + t.Name(),
		TaskQueue: runs.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			runs.AttrKind.ValueSet("SelfCheck"),
			runs.AttrName.ValueSet(t.Name()),
		),
	}, workflows.SelfCheck, want)
	require.NoError(t, err)
	var res workflows.SelfCheckResult
	require.NoError(t, run.Get(ctx, &res))
	assert.Empty(t, res.Missing)
	assert.Subset(t, res.Established, want)

	query := `QmKind = "SelfCheck" AND QmName = "` + t.Name() + `"`
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err)
		require.Len(c, resp.Executions, 1)
		assert.Equal(c, run.GetID(), resp.Executions[0].Execution.WorkflowId)
	}, 30*time.Second, 200*time.Millisecond, "the run is found by %s", query)
}
