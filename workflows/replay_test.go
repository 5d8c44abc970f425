package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/quartermaster/qm/workflows"
)

// TestReplayRecordedHistories replays histories recorded on the real dev
// server against the current workflow code. A change that would break a
// workflow already running in production (a step added, removed or
// reordered without versioning) fails here.
//
// provision-restart.json is a Provision that waited on a gate across a
// worker restart (starter's TestWorkerRestartMidProvision, run with -record).
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			workflows.Register(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}
