package apply

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// place sets the namespace of each object of wave: none for a
// cluster-scoped one, defaultNamespace for a namespaced one without.
func place(c client.Client, objs []*unstructured.Unstructured, wave []int, defaultNamespace string) error {
	for _, i := range wave {
		obj := objs[i]
		namespaced, err := c.IsObjectNamespaced(obj)
		if err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if !namespaced {
			obj.SetNamespace("")
		} else if obj.GetNamespace() == "" {
			obj.SetNamespace(defaultNamespace)
		}
	}
	return nil
}

// applyConcurrency bounds the objects of one wave applied at once.
const applyConcurrency = 8

// ordered are the kinds whose objects the API server's admission of other
// objects reads: a namespace must exist before what goes in it, a custom
// resource's definition before it, a pod's service account, limit range,
// quota, priority class and runtime class before the pod. An object of
// these kinds is applied alone, after what the template renders before
// it, and before what it renders after it.
var ordered = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ServiceAccount": true,
	"LimitRange": true, "ResourceQuota": true, "PriorityClass": true, "RuntimeClass": true,
}

// waves splits objs (by index) into the groups applied one after the
// other: each ordered object alone, and the runs of other objects between
// them together.
func waves(objs []*unstructured.Unstructured) [][]int {
	var out [][]int
	var run []int
	for i, obj := range objs {
		if !ordered[obj.GetKind()] {
			run = append(run, i)
			continue
		}
		if len(run) > 0 {
			out = append(out, run)
			run = nil
		}
		out = append(out, []int{i})
	}
	if len(run) > 0 {
		out = append(out, run)
	}
	return out
}
