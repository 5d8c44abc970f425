package starter_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestPriorityAndFairness: with more work queued than the worker takes at
// once, Temporal serves it in internal/fairness's order, with the options
// the watcher and a mass update's batches start runs with, on the real dev
// server as `make run` configures it. Users' provisions queued after a
// mass update's updates are served before most of them; a second tenant's
// six provisions queued behind the first's thirty are served among them,
// not after them.
func TestPriorityAndFairness(t *testing.T) {
	tc, _ := testenv.OwnTemporalNamespace(t)
	ctx := context.Background()
	var served atomic.Int64
	order := map[string]int64{}
	// Each run is served once, in one workflow task (two at a time, the SDK's least), which records its
	// place. (It never replays: one task, and nothing after it.)
	serve := func(ctx workflow.Context, _ lifecycle.Target) (int64, error) { return served.Add(1), nil }
	queue := func(t *testing.T, opts client.StartWorkflowOptions, op lifecycle.Operation, target lifecycle.Target) client.WorkflowRun {
		opts.EnableEagerStart = false // no worker polls yet: everything waits in the queue
		run, err := tc.ExecuteWorkflow(ctx, opts, runs.WorkflowType(op), target)
		require.NoError(t, err)
		return run
	}
	drain := func(t *testing.T, queued map[string]client.WorkflowRun) {
		served.Store(0)
		w := worker.New(tc, runs.TaskQueue, worker.Options{MaxConcurrentWorkflowTaskExecutionSize: 2, MaxConcurrentWorkflowTaskPollers: 2})
		for _, op := range []lifecycle.Operation{lifecycle.OpProvision, lifecycle.OpUpdate} {
			w.RegisterWorkflowWithOptions(serve, workflow.RegisterOptions{Name: runs.WorkflowType(op)})
		}
		require.NoError(t, w.Start())
		defer w.Stop()
		for name, run := range queued {
			var place int64
			require.NoError(t, run.Get(ctx, &place), name)
			order[name] = place
		}
	}
	target := func(ns, name string) lifecycle.Target {
		return lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: ns, Name: name}
	}

	t.Run("users' operations before a mass update's", func(t *testing.T) {
		queued := map[string]client.WorkflowRun{}
		for i := range 20 {
			tg := target("apps", fmt.Sprintf("mass-%d", i))
			opts := runs.OperationOptions(tg, lifecycle.OpUpdate, fairness.MassUpdate("nightly"), "update")
			opts.Priority.PriorityKey = fairness.Background // as activities.MassUpdates does
			queued[tg.Name] = queue(t, opts, lifecycle.OpUpdate, tg)
		}
		for i := range 20 {
			tg := target("shop", fmt.Sprintf("user-%d", i))
			queued[tg.Name] = queue(t, runs.OperationOptions(tg, lifecycle.OpProvision, fairness.Tenant("shop", ""), "provision"), lifecycle.OpProvision, tg)
		}
		drain(t, queued)
		var mass, users []int64
		for i := range 20 {
			mass, users = append(mass, order[fmt.Sprintf("mass-%d", i)]), append(users, order[fmt.Sprintf("user-%d", i)])
		}
		slices.Sort(mass)
		slices.Sort(users)
		// Queued first, the updates would be served first in arrival
		// order, and alternately with the users' by fairness alone. The
		// dev server splits a task queue into four partitions, each with
		// its own priorities, and a poll takes from one: the order holds
		// within each, so a few updates may come early.
		t.Logf("the mass update's updates were served %v of 40; the users' %v", mass, users)
		assert.GreaterOrEqual(t, mass[10], int64(26), "most of the updates wait for the users' provisions: %v", mass)
		assert.LessOrEqual(t, users[15], int64(26), "most users' provisions go first: %v", users)
	})

	t.Run("two tenants' bursts interleave", func(t *testing.T) {
		queued := map[string]client.WorkflowRun{}
		for i := range 30 {
			tg := target("team-a", fmt.Sprintf("a-%d", i))
			queued[tg.Name] = queue(t, runs.OperationOptions(tg, lifecycle.OpProvision, fairness.Tenant("team-a", ""), "provision"), lifecycle.OpProvision, tg)
		}
		for i := range 6 {
			tg := target("team-b", fmt.Sprintf("b-%d", i))
			queued[tg.Name] = queue(t, runs.OperationOptions(tg, lifecycle.OpProvision, fairness.Tenant("team-b", ""), "provision"), lifecycle.OpProvision, tg)
		}
		drain(t, queued)
		var b []int64
		for i := range 6 {
			b = append(b, order[fmt.Sprintf("b-%d", i)])
		}
		// In arrival order they would be 31st to 36th; each partition
		// shares out its own backlog, so their places scatter.
		slices.Sort(b)
		t.Logf("team-b's provisions were served %v of 36", b)
		assert.LessOrEqual(t, b[2], int64(21), "half of team-b's six are served among the first 21: %v", b)
		assert.Less(t, b[5], int64(36), "not all after team-a's: %v", b)
	})
}
