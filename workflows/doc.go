// Package workflows holds Quartermaster's Temporal workflows, one file per
// capability; each workflow opens with its steps:
//
//   - operations.go: the lifecycle of instances and bindings (Provision,
//     Update, Deprovision, Bind, Unbind), with scheduling.go (a provision's
//     first step under a scheduler), retry.go (retries that show, and
//     the backoff every wait until a deadline uses) and metrics.go (each
//     operation counted when it starts and ends, never on replay);
//   - healthcheck.go: HealthChecks, the loop of one shard of the registered
//     services' checks;
//   - claims.go: ServiceClaim, one claim from resolution to release (the
//     steps of runs begun before settled-in-one-step in claims_steps.go);
//     claims_allocator.go: ClaimAllocator, the one workflow per namespace
//     that hands its services to its claims;
//   - bindingusage.go: BindingUsage, one usage's injection into a workload;
//   - servicebinding.go: ServiceBinding, one servicebinding.io
//     ServiceBinding's projection into its workloads;
//   - massupdate.go: MassUpdate, many instances' Update runs, started in
//     batches of activities (massupdate_start.go; runs begun before
//     updates-in-batches start them as children);
//   - drift.go: DriftChecks, the loop of one shard of the instances' drift
//     checks, and Repair, a drifted instance's objects applied again;
//   - selfcheck.go: SelfCheck, the worker's start-up check.
//
// Register registers them all. Workflow code is deterministic: every
// effect goes through an activity in package activities, and every change
// to a workflow's steps is checked by replaying recorded histories
// (testdata/, listed in replay_test.go). The names runs go by (task queue,
// workflow IDs and types, signals, search attributes) are package runs'.
package workflows
