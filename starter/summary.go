package starter

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// runText is what the Temporal UI shows of a run before anyone opens it:
// a one-line summary with names, not IDs, and details that lead back to
// the resource; and, read with them, its tenant's fairness weight.
type runText struct {
	summary, details string
	weight           float32
}

// describeRun writes the summary and details of op's run on t, e.g.
// "provision default/team-a: plan small (tenant-namespace)". Plan and
// service names come from the watcher's cache; one not registered is named
// by its ID. ids are the OSB IDs worth searching for, in order.
func (s *Starter) describeRun(ctx context.Context, t lifecycle.Target, op lifecycle.Operation, planID, serviceID string, ids [][2]string) runText {
	planName, serviceName, planWeight := s.offeringNames(ctx, planID, serviceID)
	resource := strings.ToLower(string(t.Kind))
	var d strings.Builder
	fmt.Fprintf(&d, "%s %s/%s\n\n", t.Kind, t.Namespace, t.Name)
	for _, id := range ids {
		fmt.Fprintf(&d, "- %s: `%s`\n", id[0], id[1])
	}
	fmt.Fprintf(&d, "- service: %s (`%s`)\n", serviceName, serviceID)
	fmt.Fprintf(&d, "- plan: %s (`%s`)\n\n", planName, planID)
	fmt.Fprintf(&d, "`kubectl get %s %s -n %s`", resource, t.Name, t.Namespace)
	return runText{
		summary: fmt.Sprintf("%s %s/%s: plan %s (%s)", op, t.Namespace, t.Name, planName, serviceName),
		details: d.String(),
		weight:  fairness.Weight(planWeight, s.namespaceWeight(ctx, t.Namespace)),
	}
}

// namespaceWeight is the fairness weight annotated on namespace, "" for
// none (or a namespace the cache cannot read).
func (s *Starter) namespaceWeight(ctx context.Context, namespace string) string {
	var ns corev1.Namespace
	if err := s.Client.Get(ctx, ctrlclient.ObjectKey{Name: namespace}, &ns); err != nil {
		return ""
	}
	return ns.Annotations[fairness.WeightAnnotation]
}

// offeringNames returns the names of a plan and a service, or "unregistered
// <id>" for one the cache does not hold, and the fairness weight annotated
// on the plan when the catalog holds it (a tenant's own plan has none).
func (s *Starter) offeringNames(ctx context.Context, planID, serviceID string) (plan, service, weight string) {
	plan, service = "unregistered "+planID, "unregistered "+serviceID
	if plans, err := s.plansWithID(ctx, planID); err == nil && len(plans) > 0 {
		plan = plans[0].Spec.Name
		for _, p := range plans {
			if s.Catalog.Trusted(p.Namespace) {
				plan, weight = p.Spec.Name, p.Annotations[fairness.WeightAnnotation]
			}
		}
	}
	var services osbv1alpha1.SFServiceList
	if err := s.Client.List(ctx, &services, ctrlclient.MatchingFields{serviceIDField: serviceID}, ctrlclient.UnsafeDisableDeepCopy); err == nil && len(services.Items) > 0 {
		service = services.Items[0].Spec.Name
	}
	return plan, service, weight
}

// plansWithID are the SFPlans of one ID, in every namespace, read without
// a copy of their templates: through the cache's index, or, from a client
// without it (the API server's, as some tests give a Starter), out of the
// list of every plan.
func (s *Starter) plansWithID(ctx context.Context, id string) ([]osbv1alpha1.SFPlan, error) {
	var plans osbv1alpha1.SFPlanList
	if err := s.Client.List(ctx, &plans, ctrlclient.MatchingFields{planIDField: id}, ctrlclient.UnsafeDisableDeepCopy); err == nil {
		return plans.Items, nil
	}
	if err := s.Client.List(ctx, &plans, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(plans.Items, func(p osbv1alpha1.SFPlan) bool { return p.Spec.ID != id }), nil
}
