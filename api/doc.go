// Package api serves Quartermaster's HTTP front end: the OSB v2 API for
// platforms and the admin API for operators. It records requests as
// resources and answers from their status; it provisions nothing itself.
package api
