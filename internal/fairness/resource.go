package fairness

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

func contextOf(c *apiextensionsv1.JSON) []byte {
	if c == nil {
		return nil
	}
	return c.Raw
}
