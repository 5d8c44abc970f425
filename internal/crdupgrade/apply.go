package crdupgrade

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner names the release's CRD upgrade in the definitions' managed
// fields. It forces ownership: the chart's crds/ were created by Helm,
// which never updates them.
const FieldOwner = client.FieldOwner("qm-crds")

// establishTimeout bounds the wait for a definition to be served.
const establishTimeout = time.Minute

// Result is what Apply did with one definition.
type Result struct {
	Name string
	Decision
}

// Apply applies each definition that Decide lets replace the installed
// one, by server-side apply, and waits until each applied definition is
// established. It returns a Result per definition, in order; it stops at
// the first one it cannot read or write.
func Apply(ctx context.Context, c client.Client, defs []*apiextensionsv1.CustomResourceDefinition) ([]Result, error) {
	out := make([]Result, 0, len(defs))
	for _, def := range defs {
		installed := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKey{Name: def.Name}, installed)
		switch {
		case apierrors.IsNotFound(err):
			installed = nil
		case err != nil:
			return out, fmt.Errorf("reading CustomResourceDefinition %s: %w", def.Name, err)
		}
		d := Decide(installed, def)
		out = append(out, Result{Name: def.Name, Decision: d})
		if !d.Apply {
			continue
		}
		apply := def.DeepCopy()
		apply.TypeMeta.APIVersion, apply.TypeMeta.Kind = apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
		apply.ResourceVersion, apply.Status = "", apiextensionsv1.CustomResourceDefinitionStatus{}
		if err := c.Patch(ctx, apply, client.Apply, FieldOwner, client.ForceOwnership); err != nil {
			return out, fmt.Errorf("applying CustomResourceDefinition %s: %w", def.Name, err)
		}
		if err := established(ctx, c, def.Name); err != nil {
			return out, err
		}
	}
	return out, nil
}

// established waits until the API server serves the definition.
func established(ctx context.Context, c client.Client, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, establishTimeout, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CustomResourceDefinition %s to be established: %w", name, err)
	}
	return nil
}
