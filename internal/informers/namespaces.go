package informers

import "sigs.k8s.io/controller-runtime/pkg/cache"

// Namespaces is a cache's DefaultNamespaces for the namespaces a process
// is told to watch: nil, every namespace, when there are none.
func Namespaces(names []string) map[string]cache.Config {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]cache.Config, len(names))
	for _, ns := range names {
		m[ns] = cache.Config{}
	}
	return m
}
