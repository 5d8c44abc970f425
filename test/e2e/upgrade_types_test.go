package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
)

// registeredTypes records the workflow types workflows.Register registers,
// with whether each moves to the current build (a long-lived run).
type registeredTypes map[string]bool

func (r registeredTypes) RegisterWorkflow(any) {}

func (r registeredTypes) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r[o.Name] = o.VersioningBehavior == workflow.VersioningBehaviorAutoUpgrade
}

func (r registeredTypes) RegisterDynamicWorkflow(any, workflow.DynamicRegisterOptions) {}

// waitingTypes are the long-lived workflow types of this release that the
// release whose source is src does not know: their names appear nowhere in
// its workflows/runs. Rolled back to that release, such runs (loops new
// since, such as the drift checks) move to its workers, which fail their
// workflow tasks with "unable to find workflow type" until a release that
// knows them is current again: they wait, and lose nothing
// (docs/upgrades.md). Runs that end soon are pinned to the build that
// started them, so an older release never sees them.
func waitingTypes(t *testing.T, src string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(src, "workflows", "runs", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the earlier release's workflows/runs")
	var known strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		known.Write(raw)
	}
	reg := registeredTypes{}
	workflows.Register(reg)
	out := map[string]bool{}
	for name, longLived := range reg {
		if longLived && !strings.Contains(known.String(), strconv.Quote(name)) {
			out[name] = true
		}
	}
	t.Logf("long-lived types the earlier release does not know, whose runs wait through the rollback: %v", out)
	return out
}

// waitingFor says whether a log line is a workflow task of one of the
// waiting types that a worker could not run, not knowing its type.
func waitingFor(line string, waiting map[string]bool) bool {
	for name := range waiting {
		if strings.Contains(line, "unable to find workflow type: "+name+".") {
			return true
		}
	}
	return false
}

// checkWaiting checks that no run of a waiting type failed, was
// terminated or timed out through the rollback: they wait for a release
// that knows them, and nothing of them is lost.
func checkWaiting(t *testing.T, s *testenv.System, waiting map[string]bool) {
	t.Helper()
	count := func(query string) int64 {
		resp, err := s.Temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		require.NoError(t, err)
		return resp.GetCount()
	}
	for name := range waiting {
		running := count(fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Running'", name))
		assert.Zero(t, count(fmt.Sprintf("WorkflowType = %q AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut', 'Canceled')", name)),
			"no run of %s ended through the rollback", name)
		t.Logf("%d runs of %s wait for a release that knows them", running, name)
	}
}
