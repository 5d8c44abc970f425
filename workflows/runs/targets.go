package runs

// The inputs of the long-lived runs that carry one namespaced resource
// each: the watcher starts them with these, and the workflows and their
// activities read them, from this one definition.

// UsageTarget names a ServiceBindingUsage: the input of its BindingUsage
// run.
type UsageTarget struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ClaimTarget names a ServiceClaim: the input of its ServiceClaim run.
type ClaimTarget struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ServiceBindingTarget names a ServiceBinding (servicebinding.io): the
// input of its ServiceBinding run.
type ServiceBindingTarget struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}
