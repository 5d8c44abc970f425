// Package samples holds sample catalogs. `qm dev` installs those that
// Installed names: tenant-namespace, which needs no more than an API
// server, and key-value-store, which needs controllers and nodes (the
// embedded cluster has them). postgresql.yaml is the seed's plan for
// clusters that run the Zalando postgres operator.
package samples

import (
	"embed"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/plan"
)

//go:embed *.yaml
var files embed.FS

// Installed names the samples `qm dev` installs.
var Installed = []string{"tenant-namespace", "key-value-store"}

// Load returns the SFService and SFPlans of the sample <name>.yaml.
func Load(name string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no sample %q: %w", name, err)
	}
	objs, err := plan.Objects(string(raw))
	if err != nil {
		return nil, fmt.Errorf("the %s sample: %w", name, err)
	}
	return objs, nil
}
