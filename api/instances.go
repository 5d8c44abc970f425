package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/parameters"
)

// OriginatingIdentityAnnotation holds the decoded
// X-Broker-API-Originating-Identity of the last OSB request that changed a
// resource, as {"platform": ..., "value": {...}}.
const OriginatingIdentityAnnotation = "quartermaster.io/originating-identity"

// OSB error codes.
const (
	codeAsyncRequired           = "AsyncRequired"
	codeConcurrencyError        = "ConcurrencyError"
	codeMaintenanceInfoConflict = "MaintenanceInfoConflict"
	codeRequiresApp             = "RequiresApp"
)

// instanceResponse is the body of GET /v2/service_instances/:id.
type instanceResponse struct {
	ServiceID       string                        `json:"service_id"`
	PlanID          string                        `json:"plan_id"`
	DashboardURL    string                        `json:"dashboard_url,omitempty"`
	Metadata        *osbv1alpha1.InstanceMetadata `json:"metadata,omitempty"`
	Parameters      json.RawMessage               `json:"parameters,omitempty"`
	MaintenanceInfo *osbv1alpha1.MaintenanceInfo  `json:"maintenance_info,omitempty"`
}

// putInstance provisions: it records the request as an SFServiceInstance,
// which the watcher hands to the Provision workflow, and answers from the
// instance's state. Repeating the same request is safe.
func (s *Server) putInstance(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	id := chi.URLParam(r, "instance_id")
	var req provisionRequest
	if e := decodeBody(r, s.MaxBodyBytes, &req); e != nil {
		return e
	}
	plan, identity, e := s.checkProvision(ctx, r, &req)
	if e != nil {
		return e
	}
	inst := &osbv1alpha1.SFServiceInstance{
		// The finalizer is there from the start, also on clusters without
		// the admission policies: the instance is never deleted without a
		// Deprovision run, and the watcher need not write it.
		ObjectMeta: metav1.ObjectMeta{Name: ResourceName(id), Namespace: s.Namespace,
			Finalizers: []string{osbv1alpha1.InstanceFinalizer}},
		Spec: osbv1alpha1.SFServiceInstanceSpec{
			InstanceID: id, ServiceID: req.ServiceID, PlanID: req.PlanID,
			Context: toJSON(req.Context), OrganizationGUID: req.OrganizationGUID, SpaceGUID: req.SpaceGUID,
			Parameters: toJSON(req.Parameters), MaintenanceInfo: req.MaintenanceInfo,
		},
	}
	if identity != "" {
		inst.Annotations = map[string]string{OriginatingIdentityAnnotation: identity}
	}
	if plan.Spec.DeletionProtection {
		metav1.SetMetaDataAnnotation(&inst.ObjectMeta, osbv1alpha1.DeletionProtectionAnnotation, "true")
	}
	org := organizationOf(&req)
	if org != "" {
		kubenames.SetLabel(inst, OrganizationLabel, org)
	}
	release, e := s.admit(ctx, id, plan, org)
	if e != nil {
		return e
	}
	want := inst.Spec
	created, e := s.record(ctx, inst, fmt.Sprintf("instance %q", id), "deprovisioned",
		func() bool { return sameInstance(inst.Spec, want) })
	release()
	if e != nil {
		return e
	}
	return s.answerInstance(w, r, inst, plan, created)
}

// checkProvision validates a provision request against the catalog and
// returns its plan and the originating identity to record.
func (s *Server) checkProvision(ctx context.Context, r *http.Request, req *provisionRequest) (*osbv1alpha1.SFPlan, string, *requestError) {
	if e := req.validate(); e != nil {
		return nil, "", e
	}
	identity, e := originatingIdentity(r.Header.Get("X-Broker-API-Originating-Identity"))
	if e != nil {
		return nil, "", e
	}
	plan, _, e := s.plan(ctx, req.ServiceID, req.PlanID)
	if e != nil {
		return nil, "", e
	}
	if e := checkMaintenanceInfo(plan, req.MaintenanceInfo); e != nil {
		return nil, "", e
	}
	if async(plan) && !acceptsIncomplete(r) {
		return nil, "", asyncRequired(plan, "runs its operations")
	}
	if e := s.checkParameters(plan, parameters.InstanceCreate, req.Parameters); e != nil {
		return nil, "", e
	}
	return plan, identity, nil
}

// answerInstance replies to a provision or update once the instance is
// recorded. An asynchronous plan answers 202 at once (200 when there is
// nothing left to do); a synchronous one waits up to SyncTimeout for the
// workflow, and falls back to 202 if the client accepts it.
func (s *Server) answerInstance(w http.ResponseWriter, r *http.Request, inst *osbv1alpha1.SFServiceInstance, plan *osbv1alpha1.SFPlan, created bool) *requestError {
	op := instanceOperation(inst)
	lo, waited, gone, err := s.settle(r.Context(), inst, async(plan), s.SyncTimeout, func() lastOperation { return instanceProgress(inst) })
	if err != nil {
		s.internalError(w, r, "waiting for the "+op, err)
		return nil
	}
	if gone {
		return concurrencyError("instance %q was deprovisioned meanwhile", inst.Spec.InstanceID)
	}
	switch {
	case lo.State == osbSucceeded && (created || waited) && op == string(lifecycle.OpProvision):
		writeJSON(w, http.StatusCreated, operationResponse{DashboardURL: inst.Status.DashboardURL, Metadata: inst.ServedMetadata()})
	case lo.State == osbSucceeded:
		writeJSON(w, http.StatusOK, operationResponse{DashboardURL: inst.Status.DashboardURL, Metadata: inst.ServedMetadata()})
	case acceptsIncomplete(r):
		writeJSON(w, http.StatusAccepted, operationResponse{DashboardURL: inst.Status.DashboardURL, Metadata: inst.ServedMetadata(), Operation: op})
	case lo.State == osbFailed:
		writeError(w, http.StatusInternalServerError, "", lo.Description)
	default:
		writeError(w, http.StatusInternalServerError, "", fmt.Sprintf(
			"%s of instance %q did not finish within %s; it goes on, and GET /v2/service_instances/%s shows it once done",
			op, inst.Spec.InstanceID, s.SyncTimeout, inst.Spec.InstanceID))
	}
	return nil
}

// deleteInstance deprovisions: it deletes the SFServiceInstance, whose
// finalizer holds it until the Deprovision workflow has removed what it
// created.
func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	id := chi.URLParam(r, "instance_id")
	identity, e := removalRequest(r)
	if e != nil {
		return e
	}
	inst, e := s.instance(ctx, id, http.StatusGone)
	if e != nil {
		return e
	}
	if inst.Protected() {
		return &requestError{status: http.StatusUnprocessableEntity, description: fmt.Sprintf(
			"instance %q is protected from deletion (annotation %s: \"true\" on SFServiceInstance %s/%s); an operator removes the annotation to let it be deprovisioned",
			id, osbv1alpha1.DeletionProtectionAnnotation, inst.Namespace, inst.Name)}
	}
	if e := s.deprovisionInUse(ctx, inst); e != nil {
		return e
	}
	plan, _ := s.Offerings.Plan(ctx, inst.Spec.PlanID) // a plan gone from the catalog is deprovisioned synchronously
	return s.removeAndAnswer(w, r, identity, removal{
		obj: inst, what: fmt.Sprintf("instance %q", id), op: lifecycle.OpDeprovision,
		serviceID: inst.Spec.ServiceID, planID: inst.Spec.PlanID,
		plan: plan, async: async(plan), asyncDoes: "runs its operations", timeout: s.SyncTimeout,
		busy:     func() string { return instanceBusy(inst) },
		progress: func() lastOperation { return instanceProgress(inst) },
	})
}

// deprovisionInUse marks inst so that its deprovision deletes its bindings
// first instead of waiting for its users to go, as a kubectl delete does:
// OSB has the platform unbind first, and a deprovision it asks for with
// bindings left means them gone too.
func (s *Server) deprovisionInUse(ctx context.Context, inst *osbv1alpha1.SFServiceInstance) *requestError {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if inst.Annotations[osbv1alpha1.DeprovisionInUseAnnotation] == "true" {
			return nil
		}
		metav1.SetMetaDataAnnotation(&inst.ObjectMeta, osbv1alpha1.DeprovisionInUseAnnotation, "true")
		err := s.Kube.Update(ctx, inst)
		if apierrors.IsConflict(err) {
			// Read it anew for the next try, which the conflict asks for.
			if err := s.Kube.Get(ctx, client.ObjectKeyFromObject(inst), inst); err != nil {
				return err
			}
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil // gone meanwhile: the removal answers 410
	}
	if err != nil {
		return failure(fmt.Sprintf("marking instance %q to be deprovisioned with its bindings", inst.Name), err)
	}
	return nil
}

// removal is a deprovision or an unbind of obj, as the API answers it.
type removal struct {
	obj  client.Object
	what string // `instance "x"`, as messages name it
	op   lifecycle.Operation
	// serviceID and planID are obj's, which the request must name.
	serviceID, planID string
	// plan is obj's, nil once it has left the catalog; async says it runs
	// the removal asynchronously, which asyncDoes says to a request that
	// does not accept that ("unbinds").
	plan      *osbv1alpha1.SFPlan
	async     bool
	asyncDoes string
	timeout   time.Duration
	busy      func() string // what obj is busy with, or ""
	progress  func() lastOperation
}

// removalRequest checks what a deprovision and an unbind both require of
// their request (service_id and plan_id) and returns its originating
// identity.
func removalRequest(r *http.Request) (identity string, e *requestError) {
	q := r.URL.Query()
	if e := required("the query parameter service_id", q.Get("service_id"), "the query parameter plan_id", q.Get("plan_id")); e != nil {
		return "", e
	}
	return originatingIdentity(r.Header.Get("X-Broker-API-Originating-Identity"))
}

// removeAndAnswer carries out a removal that its request may ask for: it
// records the deletion, unless one is under way, and answers as the
// removal ends or goes on.
func (s *Server) removeAndAnswer(w http.ResponseWriter, r *http.Request, identity string, rm removal) *requestError {
	if e := checkRemovalIDs(r.URL.Query(), rm.what, rm.serviceID, rm.planID); e != nil {
		return e
	}
	if rm.async && !acceptsIncomplete(r) {
		return asyncRequired(rm.plan, rm.asyncDoes)
	}
	if rm.obj.GetDeletionTimestamp() == nil {
		if busy := rm.busy(); busy != "" {
			return concurrencyError("%s is busy: %s", rm.what, busy)
		}
		if ended, e := s.remove(r.Context(), rm.obj, rm.what, identity); e != nil {
			return e
		} else if ended != 0 {
			writeJSON(w, ended, struct{}{})
			return nil
		}
	}
	s.answerRemoval(w, r, rm.obj, string(rm.op), rm.async, rm.timeout, rm.progress)
	return nil
}

// answerRemoval replies to a deprovision or unbind of obj, whose deletion
// has been requested.
func (s *Server) answerRemoval(w http.ResponseWriter, r *http.Request, obj client.Object, op string, isAsync bool, timeout time.Duration, progress func() lastOperation) {
	lo, _, gone, err := s.settle(r.Context(), obj, isAsync, timeout, progress)
	if err != nil {
		s.internalError(w, r, "waiting for the "+op, err)
		return
	}
	switch {
	case gone:
		writeJSON(w, http.StatusOK, struct{}{})
	case acceptsIncomplete(r):
		writeJSON(w, http.StatusAccepted, operationResponse{Operation: op})
	case lo.State == osbFailed:
		writeError(w, http.StatusInternalServerError, "", lo.Description)
	default:
		writeError(w, http.StatusInternalServerError, "", fmt.Sprintf("%s did not finish within %s; it goes on", op, timeout))
	}
}

// getInstance serves an instance as provisioned: 404 while it is being
// provisioned, 422 while an update or deprovision runs.
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) *requestError {
	id := chi.URLParam(r, "instance_id")
	inst, e := s.instance(r.Context(), id, http.StatusNotFound)
	if e != nil {
		return e
	}
	applied := inst.Status.AppliedSpec
	if applied == nil {
		return &requestError{status: http.StatusNotFound,
			description: fmt.Sprintf("instance %q is not provisioned (%s)", id, instanceProgress(inst).Description)}
	}
	if busy := instanceBusy(inst); busy != "" {
		return concurrencyError("instance %q is busy: %s", id, busy)
	}
	writeJSON(w, http.StatusOK, instanceResponse{
		ServiceID: applied.ServiceID, PlanID: applied.PlanID, DashboardURL: inst.Status.DashboardURL,
		Metadata: inst.ServedMetadata(), Parameters: rawOf(applied.Parameters), MaintenanceInfo: applied.MaintenanceInfo,
	})
	return nil
}

// instanceLastOperation serves GET .../last_operation. A missing instance
// is 410 Gone when the poll is for its deprovision, 404 otherwise.
func (s *Server) instanceLastOperation(w http.ResponseWriter, r *http.Request) *requestError {
	id := chi.URLParam(r, "instance_id")
	asked := r.URL.Query().Get("operation")
	inst, e := s.polledInstance(r.Context(), id, asked, pollMissing(asked, string(lifecycle.OpDeprovision)))
	if e != nil {
		return e
	}
	if e := checkOperation(asked, instanceOperation(inst), fmt.Sprintf("instance %q", id)); e != nil {
		return e
	}
	writeLastOperation(w, instanceProgress(inst))
	return nil
}

// instance reads the SFServiceInstance of an OSB instance_id from the API
// server; a missing one is refused with the status the endpoint gives for it.
func (s *Server) instance(ctx context.Context, id string, missing int) (*osbv1alpha1.SFServiceInstance, *requestError) {
	return s.instanceFrom(ctx, s.Kube, id, missing)
}

// instanceFrom reads it through r: the API server, or the poll cache.
func (s *Server) instanceFrom(ctx context.Context, r client.Reader, id string, missing int) (*osbv1alpha1.SFServiceInstance, *requestError) {
	var inst osbv1alpha1.SFServiceInstance
	err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ResourceName(id)}, &inst)
	if apierrors.IsNotFound(err) || (err == nil && inst.Spec.InstanceID != "" && inst.Spec.InstanceID != id) {
		if missing == http.StatusGone {
			return nil, &requestError{status: missing} // the spec's empty body
		}
		return nil, &requestError{status: missing, description: fmt.Sprintf("instance %q does not exist", id)}
	}
	if err != nil {
		return nil, failure(fmt.Sprintf("reading instance %q", id), err)
	}
	return &inst, nil
}

// instanceBusy says what operation runs on the instance, or "" if none.
func instanceBusy(inst *osbv1alpha1.SFServiceInstance) string {
	if inst.DeletionTimestamp != nil {
		return "deprovision in progress"
	}
	if lo := instanceProgress(inst); lo.State == osbInProgress {
		return lo.Description
	}
	return ""
}
