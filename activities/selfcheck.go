package activities

import (
	"context"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubernetes holds the activities that read or write the API server.
type Kubernetes struct {
	Client client.Client
}

// EstablishedCRDs returns the names of the CustomResourceDefinitions the API
// server reports as Established, sorted.
func (k *Kubernetes) EstablishedCRDs(ctx context.Context) ([]string, error) {
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := k.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	var names []string
	for _, crd := range list.Items {
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				names = append(names, crd.Name)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}
