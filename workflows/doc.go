// Package workflows holds Quartermaster's Temporal workflows, one file per
// capability: the lifecycle of instances and bindings (operations.go) and
// the start-up self-check (selfcheck.go). Workflow code is deterministic:
// every effect goes through an activity in package activities, and every
// change to a workflow's steps is checked by replaying recorded histories
// (testdata/). The names runs go by are package runs'.
package workflows
