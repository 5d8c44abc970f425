// Package samples holds sample catalogs. tenant-namespace.yaml works on a
// bare API server and is what `qm dev` installs; postgresql.yaml is the
// seed's plan for clusters that run the Zalando postgres operator.
package samples

import (
	"embed"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/plan"
)

//go:embed *.yaml
var files embed.FS

// TenantNamespace returns the SFService and SFPlan of the tenant-namespace sample.
func TenantNamespace() ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile("tenant-namespace.yaml")
	if err != nil {
		return nil, err
	}
	objs, err := plan.Objects(string(raw))
	if err != nil {
		return nil, fmt.Errorf("the tenant-namespace sample: %w", err)
	}
	return objs, nil
}
