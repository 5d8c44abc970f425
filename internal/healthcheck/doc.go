// Package healthcheck holds the rules of a RegisteredService's health
// checks (Primaza's design, with Quartermaster's additions): which check a service
// has and how often it runs, when a check is due, what a result does to the
// service's state, and how the checks run: tcp and http in the worker, a
// container as a Job with its privileges stripped. It knows nothing of
// Temporal; activities/healthcheck.go runs it, workflows/healthcheck.go
// keeps the loops.
package healthcheck
