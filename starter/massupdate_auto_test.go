package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestAutoUpdateInstances: editing a plan with autoUpdateInstances updates
// all its instances, with the plan's massUpdate settings; a second edit
// supersedes the first run, which ends, and the second brings every
// instance to the newest generation.
func TestAutoUpdateInstances(t *testing.T) {
	const n = 20
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	massFleet(t, s, n, "  autoUpdateInstances: true\n  massUpdate: {concurrency: 2, maxFailures: \"10%\"}\n", func(int) string { return `{"gated": true}` })

	newVersion(t, s, "2")
	first := runs.MassUpdateID(s.Namespace + "/mass/2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		inProgress := 0
		for _, inst := range fleet(c, s) {
			if inst.Status.State == "in progress" {
				inProgress++
			}
		}
		assert.Equal(c, 2, inProgress, "the plan's concurrency")
	}, 30*time.Second, 50*time.Millisecond, "the plan's change starts a run")

	newVersion(t, s, "3")
	// The first run ends once its updates in flight have: let them.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		openGates(c, s)
		d, err := s.Temporal.DescribeWorkflowExecution(context.Background(), first, "")
		require.NoError(c, err)
		assert.NotEqual(c, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())
	}, 30*time.Second, 100*time.Millisecond, "the first run ends")
	var p massupdate.Progress
	require.NoError(t, s.Temporal.GetWorkflow(context.Background(), first, "").Get(context.Background(), &p))
	assert.Equal(t, massupdate.Cancelled, p.State)
	assert.Equal(t, "superseded by generation 3 of the plan", p.Reason)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		openGates(c, s)
		at3 := 0
		for _, inst := range fleet(c, s) {
			if inst.Status.AppliedPlanGeneration == 3 {
				at3++
			}
		}
		assert.Equal(c, n, at3)
	}, 2*time.Minute, 100*time.Millisecond, "every instance reaches generation 3")
	second := runs.MassUpdateID(s.Namespace + "/mass/3")
	require.NoError(t, s.Temporal.GetWorkflow(context.Background(), second, "").Get(context.Background(), &p))
	assert.Equal(t, massupdate.Completed, p.State)
	assert.Equal(t, n, p.Total)
	assert.Equal(t, 2, p.Concurrency)
}
