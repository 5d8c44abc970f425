// Package tenancy draws Quartermaster's trust boundary. The catalog
// namespaces are the platform's: their SFServices, SFPlans and SFClusters
// are trusted, and their plans apply with the worker's own rights (or a
// ServiceAccount they name). A plan anywhere else is a tenant's: it serves
// only the instances of its own namespace, is applied as a ServiceAccount
// of that namespace, so that Kubernetes' RBAC decides what it may do, and
// writes only namespaced objects there. A tenant that repeats a catalog
// plan's or service's ID never shadows it.
//
// Everything here is a pure decision; the offerings cache, the watcher and
// the activities act on it.
package tenancy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/apply"
)

// DefaultServiceAccount is the ServiceAccount a tenant's plan is applied
// as when it names none. It is a name of its own, not "default", so that
// granting it rights grants them to no pod by accident.
const DefaultServiceAccount = "quartermaster-plans"

// Boundary is the set of catalog namespaces.
type Boundary struct {
	// Catalog lists the namespaces whose offerings and clusters are
	// trusted. None: no namespace is.
	Catalog []string
}

// Trusted says whether namespace is a catalog namespace.
func (b Boundary) Trusted(namespace string) bool {
	return slices.Contains(b.Catalog, namespace)
}

// String is the catalog namespaces as a flag takes them.
func (b Boundary) String() string { return strings.Join(b.Catalog, ",") }

// Served narrows the objects that carry one OSB ID (plans or services;
// namespaceOf reads an object's namespace) to those an instance of
// namespace may use: the catalog's, if any carries the ID, otherwise its
// own namespace's. A tenant's copy of a catalog ID is never served, and
// one tenant's offerings are never another's.
func Served[T any](b Boundary, namespace string, items []T, namespaceOf func(T) string) []T {
	var catalog, own []T
	for _, it := range items {
		switch ns := namespaceOf(it); {
		case b.Trusted(ns):
			catalog = append(catalog, it)
		case ns == namespace:
			own = append(own, it)
		}
	}
	if len(catalog) > 0 {
		return catalog
	}
	return own
}

// Identity is a ServiceAccount a plan's objects are applied as.
type Identity struct {
	Namespace, Name string
}

// UserName is the identity's user as the API server knows it, for
// impersonation.
func (i Identity) UserName() string {
	return "system:serviceaccount:" + i.Namespace + ":" + i.Name
}

func (i Identity) String() string { return i.Namespace + "/" + i.Name }

// ActsAs is the ServiceAccount the objects of a plan in planNamespace are
// applied as: the one it names (serviceAccount), or DefaultServiceAccount
// for a tenant's plan. The second result is false for a catalog plan that
// names none, which is applied with the worker's own rights.
func (b Boundary) ActsAs(planNamespace, serviceAccount string) (Identity, bool) {
	switch {
	case serviceAccount != "":
		return Identity{Namespace: planNamespace, Name: serviceAccount}, true
	case !b.Trusted(planNamespace):
		return Identity{Namespace: planNamespace, Name: DefaultServiceAccount}, true
	default:
		return Identity{}, false
	}
}

// OutOfScope is the error of a tenant's plan that rendered an object it
// may not write: Quartermaster writes nothing of such a render.
type OutOfScope struct {
	Object, Reason string
}

func (e *OutOfScope) Error() string {
	return fmt.Sprintf("%s: %s; a plan outside the catalog namespaces writes only namespaced objects in its instance's namespace (docs/install.md, Tenants)", e.Object, e.Reason)
}

// CheckScope checks the objects a tenant's plan rendered for an instance
// of namespace before any is written: each is namespaced (namespaced
// answers from the API server's discovery), in that namespace or in none
// (it goes to the instance's), and not a shared singleton, which would
// adopt an object another instance made. The first that is not is the
// error.
func CheckScope(namespace string, objs []*unstructured.Unstructured, namespaced func(*unstructured.Unstructured) (bool, error)) error {
	for _, obj := range objs {
		name := obj.GetKind() + " " + obj.GetName()
		ok, err := namespaced(obj)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		switch {
		case !ok:
			return &OutOfScope{Object: name, Reason: "it is cluster-scoped"}
		case obj.GetNamespace() != "" && obj.GetNamespace() != namespace:
			return &OutOfScope{Object: name, Reason: fmt.Sprintf("it is in namespace %s, not the instance's %s", obj.GetNamespace(), namespace)}
		case obj.GetAnnotations()[apply.SingletonAnnotation] == "true":
			return &OutOfScope{Object: name, Reason: "a tenant's plan may not declare a shared singleton"}
		}
	}
	return nil
}
