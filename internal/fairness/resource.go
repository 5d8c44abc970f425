package fairness

import (
	"context"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Of is the fairness key of an operation on obj: the OSB organization that
// asked for it, else its namespace. Only an object in a catalog namespace
// (trusted: where the OSB API records what platforms ask for) is keyed by
// the organization its spec names: in a tenant's namespace the spec is the
// tenant's to write, and naming other organizations would buy it a share
// of the queue for each.
func Of(obj client.Object, trusted bool) string {
	if !trusted {
		return Tenant(obj.GetNamespace(), "")
	}
	var org string
	switch o := obj.(type) {
	case *osbv1alpha1.SFServiceInstance:
		org = Organization(contextOf(o.Spec.Context), o.Spec.OrganizationGUID)
	case *osbv1alpha1.SFServiceBinding:
		org = Organization(contextOf(o.Spec.Context), "")
	}
	return Tenant(obj.GetNamespace(), org)
}

// OfRequest is a reconcile queue's tenant of a request for an object of
// newObject's kind: Of the object as cache holds it (an in-memory lookup,
// which the workqueue makes under its lock once per item queued), or the
// request's namespace for one that is not there (deleted). A cache, not
// an informer's store: a watcher of some namespaces has an informer per
// namespace, and no one store to look in. Before the informer's first
// list is in, the cache's Get waits for it; only the informer's event
// handler adds items then, and the controller's workers start after that
// list anyway.
func OfRequest(cache client.Reader, newObject func() client.Object, trusted func(namespace string) bool) func(reconcile.Request) string {
	return func(req reconcile.Request) string {
		obj := newObject()
		if err := cache.Get(context.Background(), req.NamespacedName, obj); err == nil {
			return Of(obj, trusted(obj.GetNamespace()))
		}
		return Tenant(req.Namespace, "")
	}
}

func contextOf(c *apiextensionsv1.JSON) []byte {
	if c == nil {
		return nil
	}
	return c.Raw
}
