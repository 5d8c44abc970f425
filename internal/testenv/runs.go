package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/quartermaster/qm/workflows"
)

// Runs counts the workflow runs stored under a workflow ID, as Temporal's
// visibility has them now; a failed list is reported on t, the test or an
// Eventually condition's *assert.CollectT.
func (s *System) Runs(t require.TestingT, workflowID string) int {
	resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", workflowID),
	})
	require.NoError(t, err, "listing the runs of %s", workflowID)
	return len(resp.Executions)
}

// WorkingRuns counts the runs under a lifecycle workflow ID that did the
// operation's work, and those that found it done: a start that a watcher
// with a stale cache repeats after a failover is such an idle run (Begin
// finds the generation done, and the run returns an empty Result), and is
// no duplicate. A run that failed counts as working. Errors are reported
// on t, as Runs does.
func (s *System) WorkingRuns(t require.TestingT, workflowID string) (working, idle int) {
	// Every run is closed by now; the bound only keeps a test that is
	// wrong about that from hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := s.closedRuns(ctx, t, workflowID)
	for _, e := range resp.Executions {
		var res workflows.Result
		if err := s.Temporal.GetWorkflow(ctx, workflowID, e.Execution.RunId).Get(ctx, &res); err == nil && res.State == "" {
			idle++
			continue
		}
		working++
	}
	return working, idle
}

// closedRuns lists a workflow ID's runs once Temporal's visibility, which
// its history service writes after the fact, has caught up with the latest
// run and sees it closed: a list taken before lacks the latest runs, and a
// count of them would be short.
func (s *System) closedRuns(ctx context.Context, t require.TestingT, workflowID string) *workflowservice.ListWorkflowExecutionsResponse {
	latest, err := s.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	require.NoError(t, err, "describing the latest run of %s", workflowID)
	latestRun := latest.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %q", workflowID),
		})
		require.NoError(t, err, "listing the runs of %s", workflowID)
		if caughtUp(resp.Executions, latestRun) {
			return resp
		}
		select {
		case <-ctx.Done():
			require.Fail(t, "Temporal's visibility did not list the runs of "+workflowID+", closed", "latest run %s", latestRun)
			return resp
		case <-poll.C:
		}
	}
}

// caughtUp says whether a list holds the latest run and every run in it is
// closed.
func caughtUp(executions []*workflowpb.WorkflowExecutionInfo, latestRun string) bool {
	found := false
	for _, e := range executions {
		if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return false
		}
		found = found || e.GetExecution().GetRunId() == latestRun
	}
	return found
}
