package runs

import (
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// DriftChecksType is the registered name of the drift-check loop of one
// shard of the instances.
const DriftChecksType = "DriftChecks"

// RepairType is the registered name of a Repair run: the objects of a
// drifted instance applied again, under the instance's workflow ID.
const RepairType = "Repair"

// OperationRepair is the Operation search attribute of a Repair run.
const OperationRepair = "repair"

// maxSummary bounds a Repair run's summary, as the UI shows one line.
const maxSummary = 200

// DriftChecksInput starts, or continues, the loop of one shard: the
// watcher starts it with Shard alone, the loop continues with the rest.
type DriftChecksInput struct {
	Shard int `json:"shard"`
	// Last is where the previous pass's window ended.
	Last time.Time `json:"last,omitzero"`
	// Tick is the wait between passes (the activity says how long).
	Tick time.Duration `json:"tick,omitempty"`
	// Recent are the latest findings, newest first, that the loop's
	// current details show.
	Recent []string `json:"recent,omitempty"`
}

// DriftChecksID is the ID of the drift-check loop of shard, e.g.
// "sfserviceinstances/drift-3".
func DriftChecksID(shard int) string {
	return fmt.Sprintf("sfserviceinstances/drift-%d", shard)
}

// DriftChecksOptions start the loop of shard, or find the one running.
func DriftChecksOptions(shard int) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       DriftChecksID(shard),
		TaskQueue:                TaskQueue,
		WorkflowTaskTimeout:      WorkflowTaskTimeout,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            fmt.Sprintf("drift checks of the instances of shard %d", shard),
		Priority:                 Priority(fairness.Checks, fmt.Sprintf("drift/%d", shard)),
	}
}

// RepairOptions start the Repair run of t under its workflow ID (the
// instance's lock: a Repair never runs beside an operation of the same
// instance), behind users' operations, with what drifted as its summary.
func RepairOptions(t lifecycle.Target, tenant, found string) client.StartWorkflowOptions {
	summary := "repair of " + t.Namespace + "/" + t.Name + ": " + found
	if len(summary) > maxSummary {
		summary = summary[:maxSummary-len(" …")] + " …"
	}
	opts := OperationOptions(t, lifecycle.OpUpdate, tenant, summary)
	opts.TypedSearchAttributes = temporal.NewSearchAttributes(AttrKind.ValueSet(string(t.Kind)), AttrNamespace.ValueSet(t.Namespace),
		AttrName.ValueSet(t.Name), AttrOperation.ValueSet(OperationRepair))
	opts.Priority.PriorityKey = fairness.Background
	return opts
}
