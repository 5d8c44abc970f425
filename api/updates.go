package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/parameters"
)

// patchInstance updates an instance: a plan change, new parameters or
// context, or a maintenance_info upgrade. The Update workflow starts when
// the watcher sees the new generation.
func (s *Server) patchInstance(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	id := chi.URLParam(r, "instance_id")
	var req updateRequest
	if e := decodeBody(r, s.MaxBodyBytes, &req); e != nil {
		return e
	}
	if e := req.validate(); e != nil {
		return e
	}
	identity, e := originatingIdentity(r.Header.Get("X-Broker-API-Originating-Identity"))
	if e != nil {
		return e
	}
	inst, e := s.instance(ctx, id, http.StatusNotFound)
	if e != nil {
		return e
	}
	var plan *osbv1alpha1.SFPlan
	release := func() {}
	defer func() { release() }()
	// The patch is made on the version read; if the instance changes
	// meanwhile (a status write), it is checked and patched again.
	for attempt := 0; ; attempt++ {
		var changed bool
		from := inst.Spec.PlanID
		if plan, changed, e = s.checkUpdate(ctx, r, inst, &req, identity); e != nil {
			return e
		}
		if changed && plan.Spec.ID != from && attempt == 0 {
			// A move onto a plan counts against its maxInstances, as a
			// provision does; held until the update is recorded.
			admitted, e := s.admitPlan(ctx, plan)
			if e != nil {
				return e
			}
			release = admitted
		}
		if !changed && instanceBusy(inst) != "" { // the update under way, asked again
			return s.answerInstance(w, r, inst, plan, false)
		}
		if !changed {
			writeJSON(w, http.StatusOK, struct{}{})
			return nil
		}
		err := s.Kube.Update(ctx, inst)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 4 {
			s.internalError(w, r, "updating instance "+id, err)
			return nil
		}
		if inst, e = s.instance(ctx, id, http.StatusNotFound); e != nil {
			return e
		}
	}
	return s.answerInstance(w, r, inst, plan, false)
}

// checkUpdate validates an update request against the instance and the
// catalog, and applies it to inst. changed is false when the request asks
// for what the instance already has.
func (s *Server) checkUpdate(ctx context.Context, r *http.Request, inst *osbv1alpha1.SFServiceInstance, req *updateRequest, identity string) (*osbv1alpha1.SFPlan, bool, *requestError) {
	id := inst.Spec.InstanceID
	if req.ServiceID != inst.Spec.ServiceID {
		return nil, false, badRequest("service_id %q is not the service of instance %q (%q)", req.ServiceID, id, inst.Spec.ServiceID)
	}
	// An update under way may be this request again (a platform retrying
	// after a lost reply): that is checked below, once the spec it asks
	// for is known. Anything else under way refuses it.
	busy := instanceBusy(inst)
	if busy != "" && (inst.DeletionTimestamp != nil || inst.Status.AppliedSpec == nil) {
		return nil, false, concurrencyError("instance %q is busy: %s", id, busy)
	}
	if inst.Status.AppliedSpec == nil {
		return nil, false, badRequest("instance %q cannot be updated: its provision failed (%s); deprovision it", id, inst.Status.Description)
	}
	planID := req.PlanID
	if planID == "" {
		planID = inst.Spec.PlanID
	}
	plan, svc, e := s.plan(ctx, req.ServiceID, planID)
	if e != nil {
		return nil, false, e
	}
	if planID != inst.Spec.PlanID && !planUpdateable(ctx, s.Offerings, svc, inst.Spec.PlanID) {
		return nil, false, badRequest("the plan of instance %q cannot be changed: its plan is not plan_updateable", id)
	}
	if e := checkMaintenanceInfo(plan, req.MaintenanceInfo); e != nil {
		return nil, false, e
	}
	if async(plan) && !acceptsIncomplete(r) {
		return nil, false, asyncRequired(plan, "runs its operations")
	}
	if req.Parameters != nil {
		if e := s.checkParameters(plan, parameters.InstanceUpdate, req.Parameters); e != nil {
			return nil, false, e
		}
	}
	spec := inst.Spec.DeepCopy()
	spec.PlanID = planID
	if req.Parameters != nil {
		spec.Parameters = toJSON(req.Parameters)
	}
	if req.Context != nil {
		spec.Context = toJSON(req.Context)
	}
	if req.MaintenanceInfo != nil {
		spec.MaintenanceInfo = req.MaintenanceInfo
	}
	if sameInstance(*spec, inst.Spec) {
		return plan, false, nil
	}
	if busy != "" {
		return nil, false, concurrencyError("instance %q is busy: %s", id, busy)
	}
	spec.PreviousValues = toJSON(req.PreviousValues)
	inst.Spec = *spec
	if identity != "" {
		if inst.Annotations == nil {
			inst.Annotations = map[string]string{}
		}
		inst.Annotations[OriginatingIdentityAnnotation] = identity
	}
	return plan, true, nil
}
