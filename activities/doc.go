// Package activities holds the Temporal activities of Quartermaster's
// workflows: small, idempotent steps that talk to Kubernetes. Each
// capability has a struct of its own:
//
//   - Operations (operations.go): the lifecycle of instances and bindings,
//     on a per-run target (target.go) that loads the instance or binding,
//     its plan and service, and its cluster's client; the status template
//     and what follows from it (status.go), credentials (credentials.go),
//     registries (registry.go), removals (removal.go), bindings of an
//     instance being deprovisioned (bindings.go), parameters
//     (parameters.go); the values that cross into workflows (types.go);
//   - Scheduling (scheduling.go): a provision's choice of cluster, taken in
//     turns per namespace (scheduling_turns.go) and reserved in a ledger
//     (scheduling_ledger.go);
//   - HealthChecks (healthcheck.go, healthcheck_probe.go): a pass over one
//     shard of the registered services;
//   - Claims (claims.go): settling a claim in one step (claims_settle.go:
//     Settle, and Give, the allocator's pass), its projection into its
//     application (claims_projection.go) and its release
//     (claims_release.go); claims_allocator.go keeps the steps of runs
//     begun before the allocator woke claims from its pass;
//   - BindingUsages (bindingusage.go): resolving, injecting and removing a
//     usage;
//   - ServiceBindings (servicebinding.go): resolving a servicebinding.io
//     ServiceBinding, projecting it, recording it, taking it back and
//     releasing it, on the usages' injection;
//   - MassUpdates (massupdate.go): selecting a mass update's instances
//     (SelectInstances) and starting a batch of their Update runs and
//     waiting for them (UpdateInstances);
//   - Drift (drift.go): a pass over one shard of the instances, comparing
//     each with the record of what its last operation applied, and the
//     steps of a Repair run (drift_repair.go, which also writes the record
//     as an operation applies);
//   - Kubernetes (selfcheck.go): the worker's start-up check.
//
// What a template sees and how it renders is package plan's; applying
// objects is package apply's; the registries are package registry's.
// Activities load what those need, call them, and turn their typed errors
// into retryable or non-retryable Temporal errors (errors.go: Permanent is
// the one rule for which errors retrying cannot fix).
package activities
