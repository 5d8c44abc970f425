// Package starter is the watcher: controller-runtime reconcilers, one file
// per capability, registered in NewWatcher (watcher.go). Most turn
// resource events into Temporal workflow starts and signals, under
// workflow IDs that are business identities, so that a repeated event
// starts nothing twice (Starter, for instances and bindings; HealthChecks,
// Claims, BindingUsages, AutoUpdates for mass updates). Which operation a
// resource asks for is package lifecycle's; the operations themselves are
// workflows.
//
// Some status is derived rather than carried out, and the watcher keeps it
// itself, with no workflow: the Ready condition of SFServices and SFPlans
// (offerings.go), the ServiceCatalogs (catalogs.go, from package claims),
// the UsageKinds' resolution and RBAC (usagekinds.go), and the SFClusters'
// probes of their clusters and their finalizer (clusters.go,
// ClusterRegistry). The rules these apply live in internal packages; the
// reconcilers read, call them, and write.
//
// Every reconciler retries a failed reconcile within seconds, with a
// limiter of its own (retries.go).
package starter
