package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
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
	h, err := s.ReadHistory(workflowID, runID)
	require.NoError(s.t, err)
	return h
}

// ReadHistory is History returning its error, for an Eventually condition.
func (s *System) ReadHistory(workflowID, runID string) (*historypb.History, error) {
	iter := s.Temporal.GetWorkflowHistory(context.Background(), workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, fmt.Errorf("reading the history of %s: %w", workflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
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

// HistoryText is every string and every byte field of a history, payloads
// decoded, one per line: what a search of the history for a value must
// read (protojson writes payloads in base64, where a password would not
// show).
func HistoryText(h *historypb.History) string {
	var b strings.Builder
	var walk func(m protoreflect.Message)
	value := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
		switch {
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			walk(v.Message())
		case fd.Kind() == protoreflect.BytesKind:
			b.Write(v.Bytes())
			b.WriteByte('\n')
		case fd.Kind() == protoreflect.StringKind:
			b.WriteString(v.String())
			b.WriteByte('\n')
		}
	}
	walk = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList():
				for i := range v.List().Len() {
					value(fd, v.List().Get(i))
				}
			case fd.IsMap():
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					b.WriteString(k.String())
					b.WriteByte('\n')
					value(fd.MapValue(), mv)
					return true
				})
			default:
				value(fd, v)
			}
			return true
		})
	}
	walk(h.ProtoReflect())
	return b.String()
}
