package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/offerings"
	"github.com/quartermaster/qm/internal/parameters"
)

// plan finds a plan of the catalog and its service; unknown IDs, or a plan
// of another service, are a 400 that names the ID at fault.
func (s *Server) plan(ctx context.Context, serviceID, planID string) (*osbv1alpha1.SFPlan, *osbv1alpha1.SFService, *requestError) {
	svc, err := s.Offerings.Service(ctx, serviceID)
	if errors.Is(err, offerings.ErrNotFound) || (err == nil && svc.Namespace != s.Namespace) {
		return nil, nil, badRequest("service_id %q is not in the catalog", serviceID)
	} else if err != nil {
		return nil, nil, failure("reading the catalog's services", err)
	}
	plan, err := s.Offerings.Plan(ctx, planID)
	if errors.Is(err, offerings.ErrNotFound) || (err == nil && plan.Namespace != s.Namespace) {
		return nil, nil, badRequest("plan_id %q is not in the catalog", planID)
	} else if err != nil {
		return nil, nil, failure("reading the catalog's plans", err)
	}
	if plan.Spec.ServiceID != serviceID {
		return nil, nil, badRequest("plan_id %q is not a plan of service_id %q", planID, serviceID)
	}
	return plan, svc, nil
}

// planUpdateable reports whether an instance of the plan may move to
// another plan: the plan's plan_updateable, else its service's.
func planUpdateable(ctx context.Context, cat Offerings, svc *osbv1alpha1.SFService, currentPlanID string) bool {
	if p, err := cat.Plan(ctx, currentPlanID); err == nil && p.Spec.PlanUpdatable != nil {
		return *p.Spec.PlanUpdatable
	}
	return svc.Spec.PlanUpdatable
}

// checkMaintenanceInfo refuses a maintenance_info the plan does not offer.
func checkMaintenanceInfo(plan *osbv1alpha1.SFPlan, asked *osbv1alpha1.MaintenanceInfo) *requestError {
	if asked == nil {
		return nil
	}
	offered := plan.Spec.MaintenanceInfo
	if offered == nil || offered.Version != asked.Version {
		have := "none"
		if offered != nil {
			have = offered.Version
		}
		return &requestError{status: http.StatusUnprocessableEntity, code: codeMaintenanceInfoConflict,
			description: fmt.Sprintf("maintenance_info.version %q does not match the catalog's for plan %q (%s)", asked.Version, plan.Spec.Name, have)}
	}
	return nil
}

func async(plan *osbv1alpha1.SFPlan) bool {
	return plan != nil && plan.Spec.Manager != nil && plan.Spec.Manager.Async
}

func asyncBinding(plan *osbv1alpha1.SFPlan) bool {
	return plan != nil && plan.Spec.Manager != nil && plan.Spec.Manager.AsyncBinding
}

func acceptsIncomplete(r *http.Request) bool {
	return r.URL.Query().Get("accepts_incomplete") == "true"
}

// asyncRequired refuses a request without accepts_incomplete=true for what
// the plan does asynchronously.
func asyncRequired(plan *osbv1alpha1.SFPlan, does string) *requestError {
	return &requestError{status: http.StatusUnprocessableEntity, code: codeAsyncRequired,
		description: fmt.Sprintf("plan %q %s asynchronously; repeat the request with accepts_incomplete=true", plan.Spec.Name, does)}
}

func concurrencyError(format string, args ...any) *requestError {
	return &requestError{status: http.StatusUnprocessableEntity, code: codeConcurrencyError, description: fmt.Sprintf(format, args...)}
}

// checkParameters checks a request's parameters against the plan's schema
// for use: a violation is a 400 that names the fields, a plan whose schema
// does not compile a 500 that says so.
func (s *Server) checkParameters(plan *osbv1alpha1.SFPlan, use parameters.Use, params json.RawMessage) *requestError {
	err := s.params.Check(plan, use, params)
	var v *parameters.Violation
	switch {
	case err == nil:
		return nil
	case errors.As(err, &v):
		return badRequest("%s", v.Message)
	default:
		return failure("checking the parameters", err)
	}
}
