package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// ClosedRun waits until visibility lists a closed run of workflowType
// under workflowID, and returns its run ID.
func (s *System) ClosedRun(workflowID, workflowType string) string {
	s.t.Helper()
	query := fmt.Sprintf("WorkflowId = %q AND WorkflowType = %q AND ExecutionStatus != \"Running\"", workflowID, workflowType)
	var runID string
	require.EventuallyWithT(s.t, func(c *assert.CollectT) {
		resp, err := s.Temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err)
		require.NotEmpty(c, resp.Executions, "no closed run for %s", query)
		runID = resp.Executions[0].Execution.RunId
	}, 30*time.Second, 100*time.Millisecond)
	return runID
}

// History reads a run's history from the Temporal API.
func (s *System) History(workflowID, runID string) *historypb.History {
	s.t.Helper()
	iter := s.Temporal.GetWorkflowHistory(context.Background(), workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(s.t, err)
		h.Events = append(h.Events, ev)
	}
	return h
}

// HistoryJSON is a history as the replayer reads it, and as
// `temporal workflow show --output json` writes it.
func HistoryJSON(t testing.TB, h *historypb.History) []byte {
	t.Helper()
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	return raw
}

// WriteHistory writes a history for the replay test (workflows/testdata).
func WriteHistory(t testing.TB, h *historypb.History, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, HistoryJSON(t, h), 0o644))
}
