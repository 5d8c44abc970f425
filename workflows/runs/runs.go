// Package runs names Quartermaster's workflow runs and makes them findable:
// the task queue, the workflow ID and type of each lifecycle operation, the
// inputs the long-lived runs start with (targets.go), and the search
// attributes. The watcher, the API and the worker share these
// names without importing the workflows and their activities.
package runs

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
)

// TaskQueue is the task queue every Quartermaster worker polls.
const TaskQueue = "quartermaster"

// WorkflowTaskTimeout is every run's workflow task timeout: how long a
// worker may hold a workflow task before another may take it. It is how
// soon the run of a worker that died or stopped moves on, so it is short.
// A step that takes longer (a local activity) is not cut off: the SDK
// extends the task while the step runs, every four fifths of this.
const WorkflowTaskTimeout = 10 * time.Second

// WorkflowID is the ID every operation on one instance or binding runs
// under, e.g. "sfserviceinstance/tenant-a/db-1". It is the lock that keeps
// two operations on the same resource from running at once, and the UI
// lists all of a resource's runs under it.
func WorkflowID(t lifecycle.Target) string {
	return strings.ToLower(string(t.Kind)) + "/" + t.Namespace + "/" + t.Name
}

// WorkflowType is the registered name of the workflow that carries out op:
// "Provision", "Update", "Deprovision", "Bind" or "Unbind".
func WorkflowType(op lifecycle.Operation) string { return op.Title() }

// OperationOptions start the run of operation op on t under t's workflow
// ID, with the workflow task timeout and the search attributes that find
// it (and attrs besides): a new run once the last one has ended, and the
// error when one is under way, which may be another operation (an update
// asked for while a provision was finishing). The first workflow task goes
// to the starting process's own worker when it has one (eager start).
//
// It is a user's operation (fairness.User), of tenant: its fairness key
// (fairness.Tenant); a mass update's updates lower the priority.
func OperationOptions(t lifecycle.Target, op lifecycle.Operation, tenant, summary string, attrs ...temporal.SearchAttributeUpdate) client.StartWorkflowOptions {
	attrs = append(slices.Clip(attrs), AttrKind.ValueSet(string(t.Kind)), AttrNamespace.ValueSet(t.Namespace), AttrName.ValueSet(t.Name),
		AttrOperation.ValueSet(string(op)))
	return client.StartWorkflowOptions{
		ID:                                       WorkflowID(t),
		TaskQueue:                                TaskQueue,
		WorkflowTaskTimeout:                      WorkflowTaskTimeout,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		EnableEagerStart:                         true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(attrs...),
		StaticSummary:                            summary,
		Priority:                                 Priority(fairness.User, tenant),
	}
}

// Priority is a run's place in the task queue (internal/fairness): level,
// 1 first and 5 last, and the fairness key whose share it takes.
func Priority(level int, key string) temporal.Priority {
	return temporal.Priority{PriorityKey: level, FairnessKey: key}
}

// HealthChecksType is the registered name of the health-check loop of one
// shard of the registered services.
const HealthChecksType = "HealthChecks"

// SignalServiceChanged tells a health-check loop that a service
// ("namespace/name") was created, changed or deleted: its loop checks it
// at once.
const SignalServiceChanged = "service-changed"

// HealthChecksInput starts, or continues, the loop of one shard: the
// watcher starts it with Shard alone, the loop continues with the rest.
type HealthChecksInput struct {
	Shard int `json:"shard"`
	// Last is where the previous pass's window ended; the next window
	// starts there, so a late pass runs the checks it missed.
	Last time.Time `json:"last,omitzero"`
	// Tick is the wait between passes (the activity says how long).
	Tick time.Duration `json:"tick,omitempty"`
	// Pending are services signalled but not checked before the loop
	// continued as new.
	Pending []string `json:"pending,omitempty"`
	// Recent are the latest changes of state, newest first, that the
	// loop's current details show.
	Recent []string `json:"recent,omitempty"`
}

// HealthChecksID is the ID of the health-check loop of shard, e.g.
// "registeredservices/shard-07". One ID per shard keeps one loop.
func HealthChecksID(shard int) string {
	return fmt.Sprintf("registeredservices/shard-%02d", shard)
}

// ClaimType is the registered name of a ServiceClaim's workflow.
const ClaimType = "ServiceClaim"

// SignalClaimChanged tells a claim's workflow to look again: the claim, a
// service it holds, or a service it could take has changed.
const SignalClaimChanged = "claim-changed"

// ClaimID is the ID of the workflow of the ServiceClaim namespace/name,
// e.g. "serviceclaim/apps/db".
func ClaimID(namespace, name string) string {
	return "serviceclaim/" + namespace + "/" + name
}

// LoopOptions start, or signal into, the long-lived workflow id that
// follows one resource (a claim, a usage, a ServiceBinding, a namespace's
// allocator): on the task queue, with the workflow task timeout, a new run
// allowed once the last one has ended, and what the UI shows of it.
//
// A loop is its namespace's (fairness.Tenant) at level.
func LoopOptions(id, namespace string, level int, summary, details string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             TaskQueue,
		WorkflowTaskTimeout:   WorkflowTaskTimeout,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         summary,
		StaticDetails:         details,
		Priority:              Priority(level, fairness.Tenant(namespace, "")),
	}
}

// ClaimOptions start, or signal into, the workflow of the claim
// namespace/name (the watcher's wakes and the allocator's answers).
func ClaimOptions(namespace, name string) client.StartWorkflowOptions {
	return LoopOptions(ClaimID(namespace, name), namespace, fairness.User, fmt.Sprintf("claim %s/%s", namespace, name),
		fmt.Sprintf("kubectl get serviceclaim %s -n %s -o yaml", name, namespace))
}

// AllocatorOptions start, or signal into, the claim allocator of
// namespace (a claim's ask, or the watcher's for a new claim).
func AllocatorOptions(namespace string) client.StartWorkflowOptions {
	return LoopOptions(AllocatorID(namespace), namespace, fairness.User, "claim allocator of "+namespace, "kubectl get serviceclaims,registeredservices -n "+namespace)
}

// AllocatorType is the registered name of a namespace's claim allocator:
// the one workflow that hands the namespace's services to its claims.
const AllocatorType = "ClaimAllocator"

// SignalClaimWants asks a namespace's allocator for a service for the
// claim the signal names.
const SignalClaimWants = "claim-wants"

// SignalClaimsWant asks a namespace's allocator for a service for each
// claim the signal names (a list): the watcher's asks for new claims,
// gathered, as a burst would otherwise send the one allocator a signal per
// claim, more than one workflow should take.
const SignalClaimsWant = "claims-want"

// AllocatorID is the ID of the claim allocator of namespace, e.g.
// "claimallocator/apps".
func AllocatorID(namespace string) string {
	return "claimallocator/" + namespace
}

// BindingUsageType is the registered name of a ServiceBindingUsage's workflow.
const BindingUsageType = "ServiceBindingUsage"

// SignalUsageChanged tells a usage's workflow to look again: the usage,
// its UsageKind, its workload, its binding or the binding's Secret has
// changed.
const SignalUsageChanged = "usage-changed"

// BindingUsageID is the ID of the workflow of the ServiceBindingUsage
// namespace/name, e.g. "servicebindingusage/apps/redis-client".
func BindingUsageID(namespace, name string) string {
	return "servicebindingusage/" + namespace + "/" + name
}

// ServiceBindingType is the registered name of a ServiceBinding's
// (servicebinding.io) workflow.
const ServiceBindingType = "ServiceBinding"

// SignalServiceBindingChanged tells a ServiceBinding's workflow to look
// again: the ServiceBinding, its service, the service's Secret, a
// workload or a ClusterWorkloadResourceMapping has changed.
const SignalServiceBindingChanged = "servicebinding-changed"

// ServiceBindingID is the ID of the workflow of the ServiceBinding
// namespace/name, e.g. "servicebinding/apps/db".
func ServiceBindingID(namespace, name string) string {
	return "servicebinding/" + namespace + "/" + name
}

// CredentialRotationType is the registered name of a rotating binding's
// workflow, which replaces its credentials on a schedule.
const CredentialRotationType = "CredentialRotation"

// SignalRotationChanged tells a rotation's workflow to look again: its
// binding's policy or force annotation changed, or it is being deleted.
const SignalRotationChanged = "rotation-changed"

// CredentialRotationID is the ID of the rotation workflow of the
// SFServiceBinding namespace/name, e.g. "credentialrotation/apps/app-db".
func CredentialRotationID(namespace, name string) string {
	return "credentialrotation/" + namespace + "/" + name
}

// MassUpdateType is the registered name of the mass update workflow.
const MassUpdateType = "MassUpdate"

// SignalSteer steers a mass update: pause, resume, cancel, or a new
// concurrency (workflows.Steer).
const SignalSteer = "steer"

// QueryProgress asks a mass update for its progress (massupdate.Progress).
const QueryProgress = "progress"

// MassUpdateID is the ID of a mass update: "massupdate/<name>", where an
// automatic run's name is <namespace>/<plan>/<plan generation>.
func MassUpdateID(name string) string {
	return "massupdate/" + name
}

// MemoStartedBy is the memo field of a mass update that names who started
// it: the admin the admin API authenticated, or the watcher for a plan's
// automatic run.
const MemoStartedBy = "startedBy"

// MassUpdateOptions start the mass update name, of plan planID when it
// selects one, with summary in the UI: one run per name, ever (the ID is
// the lock, and a second start of a name is refused with the error), found
// by its kind, name, plan and state (running until it ends); its memo says
// who started it.
func MassUpdateOptions(name, planID, summary, startedBy string) client.StartWorkflowOptions {
	attrs := []temporal.SearchAttributeUpdate{AttrKind.ValueSet(MassUpdateType), AttrName.ValueSet(name),
		AttrState.ValueSet(massupdate.Running)}
	if planID != "" {
		attrs = append(attrs, AttrPlan.ValueSet(planID))
	}
	return client.StartWorkflowOptions{
		ID:                                       MassUpdateID(name),
		TaskQueue:                                TaskQueue,
		WorkflowTaskTimeout:                      WorkflowTaskTimeout,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(attrs...),
		StaticSummary:                            summary,
		StaticDetails:                            "qm mass-update status " + name,
		Memo:                                     map[string]any{MemoStartedBy: startedBy},
		Priority:                                 Priority(fairness.Background, fairness.MassUpdate(name)),
	}
}
