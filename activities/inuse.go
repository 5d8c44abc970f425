package activities

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/serviceclass"
)

// The reasons of condition InUse.
const (
	ReasonWaitingForUsers = "WaitingForUsers"
	ReasonNoUsers         = "NoUsers"
)

// maxUsers bounds the users condition InUse names; it says how many more.
const maxUsers = 10

// users lists what uses an instance: its bindings (whatever injects
// them, a usage or a ServiceBinding, uses them) and the claim that holds the
// RegisteredService registered of it. A deprovision asked for with kubectl
// waits until none is left.
func (a *Operations) users(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, bindings []osbv1alpha1.SFServiceBinding) ([]string, error) {
	var out []string
	for _, b := range bindings {
		out = append(out, "SFServiceBinding "+b.Name)
	}
	claim, err := a.claimOf(ctx, inst)
	if err != nil || claim == "" {
		return out, err
	}
	return append(out, claim), nil
}

// claimOf names the ServiceClaim that holds the RegisteredService
// registered of inst, as the service's status records it ("" for none).
func (a *Operations) claimOf(ctx context.Context, inst *osbv1alpha1.SFServiceInstance) (string, error) {
	var svc primazav1alpha1.RegisteredService
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: inst.Namespace, Name: serviceclass.Name("SFServiceInstance", inst.Name)}, &svc)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the RegisteredService of instance %s/%s: %w", inst.Namespace, inst.Name, err)
	case svc.Status.ClaimRef == nil:
		return "", nil
	}
	return "ServiceClaim " + svc.Status.ClaimRef.Name + " (holding RegisteredService " + svc.Name + ")", nil
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
