// Package samples holds sample catalogs. `qm dev` installs those that
// Installed names: tenant-namespace and key-value-store, which need a
// cluster's controllers (the namespace controller; the workload
// controllers, a scheduler and nodes), as the embedded cluster has them;
// usage-kinds, the UsageKinds of the built-in workloads; and
// key-value-store-class, which registers every key-value store as a
// claimable service.
// postgresql.yaml is the seed's plan for clusters that run the Zalando
// postgres operator.
package samples

import (
	"context"
	"embed"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/plan"
)

//go:embed *.yaml
var files embed.FS

// Catalog names the samples of the catalog `qm dev` serves, and tests
// install.
var Catalog = []string{"tenant-namespace", "key-value-store", "usage-kinds"}

// Installed names the samples `qm dev` installs: the catalog, and the
// class that registers its key-value stores (which tests that provision
// them in a shared namespace do without).
var Installed = append(slices.Clone(Catalog), "key-value-store-class")

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

// Install applies the samples names in namespace, with server-side apply
// under fieldOwner, so that a repeated install is a no-op.
func Install(ctx context.Context, c client.Client, namespace, fieldOwner string, names []string) error {
	for _, name := range names {
		objs, err := Load(name)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if obj.GetKind() != "UsageKind" { // cluster-wide
				obj.SetNamespace(namespace)
			}
			if err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
				return fmt.Errorf("installing the sample %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}
