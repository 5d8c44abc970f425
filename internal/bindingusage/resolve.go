package bindingusage

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	servicecatalogv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
)

// Verbs are what Quartermaster does with a usage kind's resources: reads
// and watches them (drift), and patches them by server-side apply.
var Verbs = []string{"get", "list", "watch", "patch"}

// WatchVerbs are those the watcher needs to follow a kind's workloads, and
// InjectVerbs those the workers need to inject into them.
var (
	WatchVerbs  = []string{"list", "watch"}
	InjectVerbs = []string{"get", "patch"}
)

// Resolve finds how the API server serves a UsageKind's resource: its
// exact kind, its version and its plural resource. The kind may be given
// in lower case or as the resource's name, as Kyma writes it
// ("deployment").
func Resolve(mapper meta.RESTMapper, r servicecatalogv1alpha1.ResourceReference) (*meta.RESTMapping, error) {
	gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: strings.ToLower(r.Kind)})
	if err != nil {
		m, err2 := mapper.RESTMapping(schema.GroupKind{Group: r.Group, Kind: r.Kind}, r.Version)
		if err2 != nil {
			return nil, notServed(mapper, r)
		}
		// A mapper may echo the kind as it was asked: the resource's kind
		// is the one it is served as.
		if gvk, err = mapper.KindFor(m.Resource); err != nil {
			return nil, notServed(mapper, r)
		}
	}
	return mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}

// notServed says why a resource does not resolve: another version is
// served, or none.
func notServed(mapper meta.RESTMapper, r servicecatalogv1alpha1.ResourceReference) error {
	gv := schema.GroupVersion{Group: r.Group, Version: r.Version}.String()
	served, err := mapper.KindFor(schema.GroupVersionResource{Group: r.Group, Resource: strings.ToLower(r.Kind)})
	if err != nil {
		return fmt.Errorf("the API server serves no kind %s in %s", r.Kind, gv)
	}
	mappings, _ := mapper.RESTMappings(served.GroupKind())
	var versions []string
	for _, m := range mappings {
		versions = append(versions, m.GroupVersionKind.Version)
	}
	slices.Sort(versions)
	return fmt.Errorf("%s %s is not served; it is served in %s", gv, served.Kind, strings.Join(versions, ", "))
}

// Access asks the API server which of Verbs an identity lacks on a
// resource in a namespace ("" for every namespace): the caller itself
// (SelfSubjectAccessReview) when serviceAccount is empty, else the service
// account "namespace:name" (SubjectAccessReview). Each miss is written as
// the RBAC rule that would grant it.
func Access(ctx context.Context, c ctrlclient.Client, gvr schema.GroupVersionResource, namespace, serviceAccount string) ([]string, error) {
	return AccessOf(ctx, c, gvr, namespace, serviceAccount, Verbs)
}

// AccessOf is Access for some verbs alone.
func AccessOf(ctx context.Context, c ctrlclient.Client, gvr schema.GroupVersionResource, namespace, serviceAccount string, verbs []string) ([]string, error) {
	var missing []string
	for _, verb := range verbs {
		attrs := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}
		allowed, err := review(ctx, c, attrs, serviceAccount)
		if err != nil {
			return nil, err
		}
		if !allowed {
			where := "in every namespace"
			if namespace != "" {
				where = "in namespace " + namespace
			}
			missing = append(missing, fmt.Sprintf(`{apiGroups: [%q], resources: [%q], verbs: [%q]} %s`, gvr.Group, gvr.Resource, verb, where))
		}
	}
	return missing, nil
}

func review(ctx context.Context, c ctrlclient.Client, attrs *authorizationv1.ResourceAttributes, serviceAccount string) (bool, error) {
	if serviceAccount == "" {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
		if err := c.Create(ctx, r); err != nil {
			return false, fmt.Errorf("asking whether I may %s %s: %w", attrs.Verb, attrs.Resource, err)
		}
		return r.Status.Allowed, nil
	}
	ns, name, ok := strings.Cut(serviceAccount, ":")
	if !ok || ns == "" || name == "" {
		return false, fmt.Errorf("service account %q: write it namespace:name", serviceAccount)
	}
	r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: attrs,
		User:               "system:serviceaccount:" + ns + ":" + name,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}}
	if err := c.Create(ctx, r); err != nil {
		return false, fmt.Errorf("asking whether %s may %s %s: %w", serviceAccount, attrs.Verb, attrs.Resource, err)
	}
	return r.Status.Allowed, nil
}
