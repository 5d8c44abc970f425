package claims

import (
	"slices"
	"strings"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Admits says whether environment env may claim a service with these
// constraints (Primaza). No list admits every environment. An entry "!e"
// excludes e, and exclusions win: once a list excludes any environment, it
// admits every environment it does not exclude, and its inclusions are
// redundant ("!prod" with "dev" admits dev and stage alike). A list of
// inclusions alone admits just those.
func Admits(c *primazav1alpha1.Constraints, env string) bool {
	if c == nil || len(c.Environments) == 0 {
		return true
	}
	excludes := false
	for _, e := range c.Environments {
		if name, ok := strings.CutPrefix(e, "!"); ok {
			if name == env {
				return false
			}
			excludes = true
		}
	}
	return excludes || slices.Contains(c.Environments, env)
}

// Environments are the environments that services and claims name: every
// environment in a service's constraints (excluded or not) and every
// claim's environmentTag, sorted.
func Environments(services []primazav1alpha1.RegisteredService, claims []primazav1alpha1.ServiceClaim) []string {
	var envs []string
	for _, svc := range services {
		if svc.Spec.Constraints == nil {
			continue
		}
		for _, e := range svc.Spec.Constraints.Environments {
			envs = append(envs, strings.TrimPrefix(e, "!"))
		}
	}
	for _, c := range claims {
		if tag := c.Spec.TargetEnvironmentTag(); tag != "" {
			envs = append(envs, tag)
		}
	}
	slices.Sort(envs)
	return slices.Compact(envs)
}
