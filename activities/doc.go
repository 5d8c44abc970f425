// Package activities holds the Temporal activities of Quartermaster's
// workflows: small, idempotent steps that talk to Kubernetes. Each
// capability has a struct of its own (Operations for the lifecycle of
// instances and bindings, Kubernetes for the self-check). What a template
// sees and how it renders is package plan's; applying objects is package
// apply's; the registries are package registry's. Activities load what
// those need, call them, and turn their typed errors into retryable or
// non-retryable Temporal errors.
package activities
