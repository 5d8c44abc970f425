package activities

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	servicebindingv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	servicecatalogv1alpha1 "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/serviceclass"
)

// The reasons of condition InUse.
const (
	ReasonWaitingForUsers = "WaitingForUsers"
	ReasonNoUsers         = "NoUsers"
)

// maxUsers bounds the users condition InUse names; it says how many more.
const maxUsers = 10

// users lists what uses an instance: its bindings, the usages and
// ServiceBindings that inject them, and the claims that hold the
// RegisteredService registered of it. A deprovision asked for with kubectl
// waits until none is left.
func (a *Operations) users(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, bindings []osbv1alpha1.SFServiceBinding) ([]string, error) {
	var out []string
	names := map[string]bool{}
	for _, b := range bindings {
		out = append(out, "SFServiceBinding "+b.Name)
		names[b.Name] = true
	}
	var usages servicecatalogv1alpha1.ServiceBindingUsageList
	if err := a.Client.List(ctx, &usages, client.InNamespace(inst.Namespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing the usages in %s: %w", inst.Namespace, err)
	}
	for _, u := range usages.Items {
		if ref := u.Spec.ServiceBindingRef; names[ref.Name] && (ref.Kind == "" || ref.Kind == "SFServiceBinding") {
			out = append(out, "ServiceBindingUsage "+u.Name)
		}
	}
	var sbs servicebindingv1.ServiceBindingList
	if err := a.Client.List(ctx, &sbs, client.InNamespace(inst.Namespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing the ServiceBindings in %s: %w", inst.Namespace, err)
	}
	for _, sb := range sbs.Items {
		if sb.Spec.Service.Kind == "SFServiceBinding" && names[sb.Spec.Service.Name] {
			out = append(out, "ServiceBinding "+sb.Name)
		}
	}
	claims, err := a.claimsOf(ctx, inst)
	if err != nil {
		return nil, err
	}
	return append(out, claims...), nil
}

// claimsOf names the ServiceClaims, in any namespace, that hold the
// RegisteredService registered of inst (by its UID, as a claim holds it).
func (a *Operations) claimsOf(ctx context.Context, inst *osbv1alpha1.SFServiceInstance) ([]string, error) {
	var svc primazav1alpha1.RegisteredService
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: inst.Namespace, Name: serviceclass.Name("SFServiceInstance", inst.Name)}, &svc)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the RegisteredService of instance %s/%s: %w", inst.Namespace, inst.Name, err)
	}
	var list primazav1alpha1.ServiceClaimList
	if err := a.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the claims: %w", err)
	}
	var out []string
	for _, c := range list.Items {
		if c.Status.RegisteredServiceUID == svc.UID {
			out = append(out, "ServiceClaim "+c.Namespace+"/"+c.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// inUse is the InUse condition of an instance whose deprovision waits for
// users (none: False).
func inUse(users []string, generation int64) metav1.Condition {
	if len(users) == 0 {
		return metav1.Condition{Type: osbv1alpha1.ConditionInUse, Status: metav1.ConditionFalse, Reason: ReasonNoUsers,
			Message: "no users left", ObservedGeneration: generation}
	}
	named := users
	more := ""
	if len(named) > maxUsers {
		more = fmt.Sprintf(" and %d more", len(named)-maxUsers)
		named = named[:maxUsers]
	}
	return metav1.Condition{Type: osbv1alpha1.ConditionInUse, Status: metav1.ConditionTrue, Reason: ReasonWaitingForUsers, ObservedGeneration: generation,
		Message: fmt.Sprintf("the deprovision waits for its users to go: %s%s (annotate %s=true to have it delete the instance's bindings first)",
			strings.Join(named, ", "), more, osbv1alpha1.DeprovisionInUseAnnotation)}
}
