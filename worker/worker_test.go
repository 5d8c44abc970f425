package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/worker"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSelfCheckOnRealServers runs the SelfCheck workflow on the dev server
// built into bin/temporal, with a worker whose activity reads the real API
// server, and reads the run back from the server.
func TestSelfCheckOnRealServers(t *testing.T) {
	kube := testenv.Kubernetes(t)
	tc := testenv.Temporal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	require.NoError(t, worker.EnsureSearchAttributes(ctx, tc, "default"), "idempotent on a server that has them")

	w := worker.New(tc, worker.Activities{Kube: kube.Client}, worker.Options{})
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
	}, workflows.SelfCheck, want)
	require.NoError(t, err)
	var res workflows.SelfCheckResult
	require.NoError(t, run.Get(ctx, &res))
	assert.Empty(t, res.Missing, "the worker's activity read every CRD established from the API server")
	assert.Subset(t, res.Established, want)

	// The run, as the Temporal server recorded it: the worker completed it.
	desc, err := tc.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	require.NoError(t, err)
	assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.WorkflowExecutionInfo.Status)
	assert.Equal(t, "SelfCheck", desc.WorkflowExecutionInfo.Type.Name)
}
