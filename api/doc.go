// Package api serves Quartermaster's HTTP front end: the OSB v2 API for
// platforms and the admin API for operators. It records requests as
// resources and answers from their status; it provisions nothing itself.
//
// Server (server.go) routes with chi, one file per resource: the catalog
// (catalog.go), instances (instances.go, and their updates in updates.go),
// bindings (bindings.go), their last_operation (polls.go, from a cache when
// it cannot mislead) and the OSB progress of a status (progress.go); the
// admin API's instances (admin.go) and mass updates (massupdates.go).
// Handlers return their refusal, a *requestError, which Server.osb writes
// (errors.go). Requests are decoded and bounded in decode.go, recorded as
// resources in records.go, named in names.go (ResourceName), checked
// against their plan in plans.go; middleware.go holds the version and
// authentication checks, observe.go the request log and metrics, tls.go
// HTTPS. AdminClient (adminclient.go) calls the admin API from Go.
package api
