// Package claims holds the rules of Primaza's second half: which
// environments may claim a registered service (its constraints), which
// environments there are, and what each environment's ServiceCatalog lists.
// It knows nothing of Temporal or the API server; starter/catalogs.go keeps
// the catalogs with it.
package claims
