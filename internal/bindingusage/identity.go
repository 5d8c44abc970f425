package bindingusage

import (
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Provider is what the provider file of a binding Quartermaster brokered
// says; its type file holds the service's name.
const Provider = "quartermaster"

// ClaimIdentity is the type and provider of a claimed service's binding:
// those of the claim's service class identity ("" where it has none).
func ClaimIdentity(ids []primazav1alpha1.ServiceClassIdentityItem) (typ, provider string) {
	for _, id := range ids {
		switch id.Name {
		case "type":
			typ = id.Value
		case "provider":
			provider = id.Value
		}
	}
	return typ, provider
}
