// Package starter is the watcher: controller-runtime reconcilers that turn
// resource events into Temporal workflow starts, under workflow IDs that are
// business identities, so that a repeated event starts nothing twice. It
// holds no business logic: which operation a resource asks for is package
// lifecycle's, and the operations themselves are workflows. It also keeps
// the Ready condition of SFServices and SFPlans.
package starter
