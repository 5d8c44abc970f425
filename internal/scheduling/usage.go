package scheduling

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Allocatable sums what a cluster's schedulable nodes can give to pods:
// its capacity when the SFCluster sets no totalCapacity.
func Allocatable(nodes []corev1.Node) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, n := range nodes {
		if !n.Spec.Unschedulable {
			Add(sum, n.Status.Allocatable)
		}
	}
	return sum
}

// PodRequests sums the requests of the pods that hold resources (not
// those that ended), as kube-scheduler counts them, and counts the pods
// under "pods", which nodes also list among their allocatable.
func PodRequests(pods []corev1.Pod) corev1.ResourceList {
	sum := corev1.ResourceList{}
	n := int64(0)
	for i := range pods {
		if p := pods[i].Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
			continue
		}
		Add(sum, resourcehelper.PodRequests(&pods[i], resourcehelper.PodResourcesOptions{}))
		n++
	}
	sum[corev1.ResourcePods] = *resource.NewQuantity(n, resource.DecimalSI)
	return sum
}

// Demand reads an instance's demand from its plan's context: requests, a
// map of resource names to quantities, as in Service Fabrik.
func Demand(planContext *apiextensionsv1.JSON) (corev1.ResourceList, error) {
	if planContext == nil || len(planContext.Raw) == 0 {
		return nil, nil
	}
	var ctx struct {
		Requests map[corev1.ResourceName]json.RawMessage `json:"requests"`
	}
	if err := json.Unmarshal(planContext.Raw, &ctx); err != nil {
		return nil, fmt.Errorf("reading the plan's context: %w", err)
	}
	demand := corev1.ResourceList{}
	for name, raw := range ctx.Requests {
		var q resource.Quantity
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, fmt.Errorf("the plan's context.requests.%s %s is not a quantity: %w", name, raw, err)
		}
		demand[name] = q
	}
	return demand, nil
}

// Add adds more to sum, resource by resource.
func Add(sum, more corev1.ResourceList) {
	for name, q := range more {
		total := sum[name].DeepCopy()
		total.Add(q)
		sum[name] = total
	}
}
