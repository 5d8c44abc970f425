package claims

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// HolderField is the index (and the CRD's selectable field) of
// RegisteredServices by the UID of the claim that holds them.
const HolderField = "status.claimRef.uid"

// Holder is the HolderField index's value of a RegisteredService: the UID
// of the claim that holds it, if any.
func Holder(o client.Object) []string {
	if svc, ok := o.(*primazav1alpha1.RegisteredService); ok && svc.Status.ClaimRef != nil {
		return []string{string(svc.Status.ClaimRef.UID)}
	}
	return nil
}

// SecretsField is the index of RegisteredServices by the Secrets their
// endpoint definition reads (valueFromSecret), so that a Secret that
// changes finds the claim that holds its service.
const SecretsField = "spec.serviceEndpointDefinition.valueFromSecret.name"

// SecretsOf is the SecretsField index's value of a RegisteredService: the
// names of the Secrets its endpoint definition reads, each once.
func SecretsOf(o client.Object) []string {
	svc, ok := o.(*primazav1alpha1.RegisteredService)
	if !ok {
		return nil
	}
	var names []string
	for _, e := range svc.Spec.ServiceEndpointDefinition {
		if e.ValueFromSecret != nil && !slices.Contains(names, e.ValueFromSecret.Name) {
			names = append(names, e.ValueFromSecret.Name)
		}
	}
	return names
}

// Claimable says whether a service can be claimed now: Available (which a
// claimed, Unreachable or Unknown service is not) and held by no claim.
func Claimable(svc *primazav1alpha1.RegisteredService) bool {
	return svc.DeletionTimestamp.IsZero() && svc.Status.State == primazav1alpha1.ServiceAvailable && svc.Status.ClaimRef == nil
}

// CheckedOnly says whether a service's update is its health check's
// bookkeeping alone (the last result, its message and time, the counters,
// the Healthy condition) with its state as it was: nothing a claim reads,
// so that services checked at rest wake no claim.
func CheckedOnly(before, after *primazav1alpha1.RegisteredService) bool {
	b, a := before.Status.DeepCopy(), after.Status.DeepCopy()
	b.HealthCheck, a.HealthCheck, b.Conditions, a.Conditions = nil, nil, nil, nil
	return before.Generation == after.Generation && after.DeletionTimestamp.IsZero() && maps.Equal(before.Labels, after.Labels) &&
		equality.Semantic.DeepEqual(b, a)
}

// Catalog lists what environment env can claim among services: every
// claimable service its constraints admit, by name, with its class
// identity and its endpoint keys, never their values.
func Catalog(env string, services []primazav1alpha1.RegisteredService) []primazav1alpha1.ServiceCatalogService {
	out := []primazav1alpha1.ServiceCatalogService{}
	for i := range services {
		svc := &services[i]
		if !Claimable(svc) || !Admits(svc.Spec.Constraints, env) {
			continue
		}
		out = append(out, catalogEntry(svc))
	}
	slices.SortFunc(out, func(a, b primazav1alpha1.ServiceCatalogService) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ClaimedByLabels lists the services of environment env that a claim
// among claims holds for the workloads its application's label selector
// matches, each with that selector, as Primaza's catalogs do.
func ClaimedByLabels(env string, services []primazav1alpha1.RegisteredService, claims []primazav1alpha1.ServiceClaim) []primazav1alpha1.ServiceCatalogServiceByLabel {
	selectors := map[string]*metav1.LabelSelector{}
	for i := range claims {
		c := &claims[i]
		if c.Spec.Application != nil && c.Spec.Application.Selector != nil {
			selectors[string(c.UID)] = c.Spec.Application.Selector
		}
	}
	out := []primazav1alpha1.ServiceCatalogServiceByLabel{}
	for i := range services {
		svc := &services[i]
		if svc.Status.ClaimRef == nil || !Admits(svc.Spec.Constraints, env) {
			continue
		}
		if selector, ok := selectors[string(svc.Status.ClaimRef.UID)]; ok {
			out = append(out, primazav1alpha1.ServiceCatalogServiceByLabel{ServiceCatalogService: catalogEntry(svc), Labels: selector.DeepCopy()})
		}
	}
	slices.SortFunc(out, func(a, b primazav1alpha1.ServiceCatalogServiceByLabel) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// catalogEntry is how a catalog lists svc: by name, with its class
// identity and its endpoint keys, never their values.
func catalogEntry(svc *primazav1alpha1.RegisteredService) primazav1alpha1.ServiceCatalogService {
	keys := make([]string, 0, len(svc.Spec.ServiceEndpointDefinition))
	for _, item := range svc.Spec.ServiceEndpointDefinition {
		keys = append(keys, item.Name)
	}
	slices.Sort(keys)
	identity := slices.Clone(svc.Spec.ServiceClassIdentity)
	slices.SortFunc(identity, func(a, b primazav1alpha1.ServiceClassIdentityItem) int { return strings.Compare(a.Name, b.Name) })
	return primazav1alpha1.ServiceCatalogService{Name: svc.Name, ServiceClassIdentity: identity, ServiceEndpointDefinitionKeys: keys}
}
