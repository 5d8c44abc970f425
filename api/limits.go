package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/limits"
)

// OrganizationLabel marks an OSB instance with its organization (a
// Kubernetes platform's context namespace, else the organization_guid), by
// which the API counts an organization's instances.
const OrganizationLabel = "quartermaster.io/organization"

// Limits are the operator's limits on OSB provisions (a plan's own is its
// maxInstances). Zero is no limit.
type Limits struct {
	// InstancesPerOrganization bounds each organization's instances.
	InstancesPerOrganization int
}

// organizationOf is the organization a provision request is made for, as
// fairness keys it: "" for none.
func organizationOf(req *provisionRequest) string {
	return fairness.Organization(req.Context, req.OrganizationGUID)
}

// admit checks a provision of instance id against its plan's maxInstances
// and its organization's limit, and holds both until release: the caller
// records the instance in between. A repeated request for an instance that
// exists is not counted again.
func (s *Server) admit(ctx context.Context, id string, plan *osbv1alpha1.SFPlan, org string) (release func(), e *requestError) {
	var checks []func() *requestError
	var unlocks []func()
	release = func() {
		for _, u := range unlocks {
			u()
		}
	}
	if plan.Spec.MaxInstances != nil {
		unlocks = append(unlocks, s.limitLocks.Lock("plan/"+plan.Spec.ID))
		checks = append(checks, func() *requestError { return s.admitPlanCount(ctx, plan) })
	}
	if max := s.Limits.InstancesPerOrganization; max > 0 && org != "" {
		unlocks = append(unlocks, s.limitLocks.Lock("org/"+org))
		checks = append(checks, func() *requestError {
			return s.admitCount(ctx, limits.Limit{Of: fmt.Sprintf("organization %q", org), Max: max},
				client.InNamespace(s.Namespace), client.MatchingLabels{OrganizationLabel: kubenames.LabelValue(org)})
		})
	}
	if len(checks) == 0 {
		return release, nil
	}
	var existing osbv1alpha1.SFServiceInstance
	switch err := s.Kube.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ResourceName(id)}, &existing); {
	case err == nil:
		return release, nil // a repeat, which record answers
	case !apierrors.IsNotFound(err):
		release()
		return nil, failure("reading instance "+id, err)
	}
	for _, check := range checks {
		if e := check(); e != nil {
			release()
			return nil, e
		}
	}
	return release, nil
}

// admitPlan checks an instance's move onto plan against its maxInstances,
// and holds the plan's count until release, as admit does for a
// provision.
func (s *Server) admitPlan(ctx context.Context, plan *osbv1alpha1.SFPlan) (release func(), e *requestError) {
	if plan.Spec.MaxInstances == nil {
		return func() {}, nil
	}
	unlock := s.limitLocks.Lock("plan/" + plan.Spec.ID)
	if e := s.admitPlanCount(ctx, plan); e != nil {
		unlock()
		return nil, e
	}
	return unlock, nil
}

// admitPlanCount refuses one more instance on a plan at its maxInstances.
func (s *Server) admitPlanCount(ctx context.Context, plan *osbv1alpha1.SFPlan) *requestError {
	return s.admitCount(ctx, limits.Limit{Of: fmt.Sprintf("plan %q", plan.Spec.Name), Max: int(*plan.Spec.MaxInstances)},
		client.MatchingFields{"spec.planId": plan.Spec.ID})
}

// admitCount counts the instances opts select, as metadata, and refuses
// one more beyond l.
func (s *Server) admitCount(ctx context.Context, l limits.Limit, opts ...client.ListOption) *requestError {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(osbv1alpha1.GroupVersion.WithKind("SFServiceInstanceList"))
	if err := s.Kube.List(ctx, list, opts...); err != nil {
		return failure("counting the instances of "+l.Of, err)
	}
	count := 0
	for _, i := range list.Items {
		if i.DeletionTimestamp == nil {
			count++
		}
	}
	if err := limits.Admit(l, count); err != nil {
		return &requestError{status: http.StatusForbidden, description: err.Error()}
	}
	return nil
}

// quotaRefusal is the API server's refusal of an instance beyond its
// namespace's ResourceQuota, which the API passes on as a 403 with the
// API server's words; nil for any other error.
func quotaRefusal(what string, err error) *requestError {
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		return nil
	}
	return &requestError{status: http.StatusForbidden, description: what + " would exceed its namespace's limit: " + err.Error()}
}
