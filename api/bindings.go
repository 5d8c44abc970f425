package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/parameters"
)

// bindingResponse is the body of a bind that succeeded and of GET binding.
type bindingResponse struct {
	Credentials     map[string]any                `json:"credentials"`
	Endpoints       []osbv1alpha1.BindingEndpoint `json:"endpoints,omitempty"`
	VolumeMounts    json.RawMessage               `json:"volume_mounts,omitempty"`
	SyslogDrainURL  string                        `json:"syslog_drain_url,omitempty"`
	RouteServiceURL string                        `json:"route_service_url,omitempty"`
	Metadata        *bindingMetadata              `json:"metadata,omitempty"`
	Parameters      json.RawMessage               `json:"parameters,omitempty"`
}

// bindingMetadata is the OSB spelling of the binding metadata the status
// keeps. (Endpoints are spelled alike in both.)
type bindingMetadata struct {
	ExpiresAt   string `json:"expires_at,omitempty"`
	RenewBefore string `json:"renew_before,omitempty"`
}

// putBinding binds: it records the request as an SFServiceBinding, which
// the watcher hands to the Bind workflow, and answers with the credentials
// once the binding succeeded.
func (s *Server) putBinding(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	iid, bid := chi.URLParam(r, "instance_id"), chi.URLParam(r, "binding_id")
	var req bindRequest
	if e := decodeBody(r, s.MaxBodyBytes, &req); e != nil {
		return e
	}
	inst, plan, identity, e := s.checkBind(ctx, r, iid, bid, &req)
	if e != nil {
		return e
	}
	name, e := s.bindingName(ctx, s.Kube, bid)
	if e != nil {
		return e
	}
	predecessor, e := s.predecessorName(ctx, req.PredecessorBindingID)
	if e != nil {
		return e
	}
	var bindResource json.RawMessage
	if req.BindResource != nil {
		bindResource, _ = json.Marshal(req.BindResource)
	}
	b := &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace,
			Finalizers: []string{osbv1alpha1.BindingFinalizer}},
		Spec: osbv1alpha1.SFServiceBindingSpec{
			ID: bid, InstanceID: inst.Name, ServiceID: req.ServiceID, PlanID: req.PlanID,
			BindResource: toJSON(bindResource), Context: toJSON(req.Context), Parameters: toJSON(req.Parameters),
			AcceptsIncomplete: acceptsIncomplete(r), PredecessorBinding: predecessor,
			AppGUID: req.appGUID(),
		},
	}
	if identity != "" {
		b.Annotations = map[string]string{OriginatingIdentityAnnotation: identity}
	}
	want := b.Spec
	created, e := s.record(ctx, b, fmt.Sprintf("binding %q", bid), "unbound",
		func() bool { return sameBinding(b.Spec, want) })
	if e != nil {
		return e
	}

	lo, waited, gone, err := s.settle(ctx, b, asyncBinding(plan), s.BindTimeout, func() lastOperation { return bindingProgress(b) })
	if err != nil {
		s.internalError(w, r, "waiting for the bind", err)
		return nil
	}
	if gone {
		return concurrencyError("binding %q was unbound meanwhile", bid)
	}
	switch {
	case lo.State == osbSucceeded:
		resp, err := s.bindingResponse(ctx, b)
		if err != nil {
			s.internalError(w, r, "reading the credentials of binding "+bid, err)
			return nil
		}
		status := http.StatusOK
		if created || waited {
			status = http.StatusCreated
		}
		writeJSON(w, status, resp)
	case acceptsIncomplete(r):
		writeJSON(w, http.StatusAccepted, operationResponse{Operation: string(lifecycle.OpBind)})
	case lo.State == osbFailed:
		writeError(w, http.StatusInternalServerError, "", lo.Description)
	default:
		writeError(w, http.StatusInternalServerError, "", fmt.Sprintf(
			"bind %q did not finish within %s; it goes on, and GET .../service_bindings/%s shows it once done", bid, s.BindTimeout, bid))
	}
	return nil
}

// checkBind validates a bind request against its instance and the catalog.
func (s *Server) checkBind(ctx context.Context, r *http.Request, iid, bid string, req *bindRequest) (*osbv1alpha1.SFServiceInstance, *osbv1alpha1.SFPlan, string, *requestError) {
	if e := req.validate(); e != nil {
		return nil, nil, "", e
	}
	identity, e := originatingIdentity(r.Header.Get("X-Broker-API-Originating-Identity"))
	if e != nil {
		return nil, nil, "", e
	}
	inst, e := s.instance(ctx, iid, http.StatusNotFound)
	if e != nil {
		return nil, nil, "", e
	}
	switch {
	case inst.DeletionTimestamp != nil:
		return nil, nil, "", concurrencyError("instance %q is being deprovisioned", iid)
	case inst.Status.AppliedSpec == nil && instanceBusy(inst) != "":
		return nil, nil, "", concurrencyError("instance %q is being provisioned", iid)
	case inst.Status.AppliedSpec == nil:
		return nil, nil, "", badRequest("instance %q cannot be bound: its provision failed", iid)
	case req.ServiceID != inst.Spec.ServiceID || req.PlanID != inst.Spec.PlanID:
		return nil, nil, "", badRequest("service_id %q and plan_id %q are not those of instance %q (%q, %q)",
			req.ServiceID, req.PlanID, iid, inst.Spec.ServiceID, inst.Spec.PlanID)
	}
	plan, svc, e := s.plan(ctx, req.ServiceID, req.PlanID)
	if e != nil {
		return nil, nil, "", e
	}
	bindable := svc.Spec.Bindable
	if plan.Spec.Bindable != nil {
		bindable = *plan.Spec.Bindable
	}
	if !bindable {
		return nil, nil, "", badRequest("plan %q of service %q is not bindable", plan.Spec.Name, svc.Spec.Name)
	}
	if req.PredecessorBindingID != "" {
		if e := s.rotate(ctx, inst, plan, bid, req); e != nil {
			return nil, nil, "", e
		}
	}
	if plan.Spec.Manager != nil && plan.Spec.Manager.RequiresApp && req.appGUID() == "" {
		return nil, nil, "", &requestError{status: http.StatusUnprocessableEntity, code: codeRequiresApp,
			description: fmt.Sprintf("plan %q binds to apps only: bind_resource.app_guid is required", plan.Spec.Name)}
	}
	if asyncBinding(plan) && !acceptsIncomplete(r) {
		return nil, nil, "", asyncRequired(plan, "binds")
	}
	if e := s.checkParameters(plan, parameters.BindingCreate, req.Parameters); e != nil {
		return nil, nil, "", e
	}
	return inst, plan, identity, nil
}

// deleteBinding unbinds: it deletes the SFServiceBinding, whose finalizer
// holds it until the Unbind workflow has removed what it created.
func (s *Server) deleteBinding(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	iid, bid := chi.URLParam(r, "instance_id"), chi.URLParam(r, "binding_id")
	identity, e := removalRequest(r)
	if e != nil {
		return e
	}
	b, e := s.binding(ctx, iid, bid, http.StatusGone)
	if e != nil {
		return e
	}
	// A binding whose plan has since left the catalog (or is claimed twice)
	// can still be unbound: without its plan the unbind is answered as a
	// synchronous one, and the worker's Unbind says what it cannot do.
	plan, err := s.Offerings.Plan(ctx, b.Spec.PlanID)
	if err != nil {
		s.Logger.Info("unbinding a binding whose plan is not in the catalog", "binding", bid, "plan", b.Spec.PlanID, "error", err)
	}
	return s.removeAndAnswer(w, r, identity, removal{
		obj: b, what: fmt.Sprintf("binding %q", bid), op: lifecycle.OpUnbind,
		serviceID: b.Spec.ServiceID, planID: b.Spec.PlanID,
		plan: plan, async: asyncBinding(plan), asyncDoes: "unbinds", timeout: s.BindTimeout,
		busy: func() string {
			if lo := bindingProgress(b); lo.State == osbInProgress {
				return cmp.Or(lo.Description, string(lo.State))
			}
			return ""
		},
		progress: func() lastOperation { return bindingProgress(b) },
	})
}

// getBinding serves a binding that succeeded, with its credentials; one
// that is being bound or unbound, or whose instance is gone, is 404.
func (s *Server) getBinding(w http.ResponseWriter, r *http.Request) *requestError {
	ctx := r.Context()
	iid, bid := chi.URLParam(r, "instance_id"), chi.URLParam(r, "binding_id")
	b, e := s.binding(ctx, iid, bid, http.StatusNotFound)
	if e != nil {
		return e
	}
	if lo := bindingProgress(b); lo.State != osbSucceeded || b.DeletionTimestamp != nil {
		return &requestError{status: http.StatusNotFound,
			description: fmt.Sprintf("binding %q is not bound (%s: %s)", bid, lo.State, lo.Description)}
	}
	// Credentials to an instance that is gone, or going, are stale.
	if inst, e := s.instance(ctx, iid, http.StatusNotFound); e != nil || inst.DeletionTimestamp != nil {
		return &requestError{status: http.StatusNotFound,
			description: fmt.Sprintf("binding %q is of instance %q, which is deprovisioned", bid, iid)}
	}
	resp, err := s.bindingResponse(ctx, b)
	if err != nil {
		s.internalError(w, r, "reading the credentials of binding "+bid, err)
		return nil
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// bindingLastOperation serves GET .../service_bindings/:bid/last_operation.
func (s *Server) bindingLastOperation(w http.ResponseWriter, r *http.Request) *requestError {
	iid, bid := chi.URLParam(r, "instance_id"), chi.URLParam(r, "binding_id")
	asked := r.URL.Query().Get("operation")
	b, e := s.polledBinding(r.Context(), iid, bid, asked, pollMissing(asked, string(lifecycle.OpUnbind)))
	if e != nil {
		return e
	}
	if e := checkOperation(asked, bindingOperation(b), fmt.Sprintf("binding %q", bid)); e != nil {
		return e
	}
	writeLastOperation(w, bindingProgress(b))
	return nil
}

// binding reads the SFServiceBinding of an OSB binding_id of instance iid
// from the API server.
func (s *Server) binding(ctx context.Context, iid, bid string, missing int) (*osbv1alpha1.SFServiceBinding, *requestError) {
	return s.bindingFrom(ctx, s.Kube, iid, bid, missing)
}

// bindingFrom reads it through r: the API server, or the poll cache.
func (s *Server) bindingFrom(ctx context.Context, r client.Reader, iid, bid string, missing int) (*osbv1alpha1.SFServiceBinding, *requestError) {
	name, e := s.bindingName(ctx, r, bid)
	if e != nil {
		return nil, e
	}
	var b osbv1alpha1.SFServiceBinding
	err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &b)
	if apierrors.IsNotFound(err) || (err == nil && (b.Spec.ID != bid || b.Spec.InstanceID != ResourceName(iid))) {
		if missing == http.StatusGone {
			return nil, &requestError{status: missing}
		}
		return nil, &requestError{status: missing, description: fmt.Sprintf("binding %q of instance %q does not exist", bid, iid)}
	}
	if err != nil {
		return nil, failure(fmt.Sprintf("reading binding %q", bid), err)
	}
	return &b, nil
}

// bindingResponse reads the credentials from the binding's Secret, giving
// JSON values back their types.
func (s *Server) bindingResponse(ctx context.Context, b *osbv1alpha1.SFServiceBinding) (bindingResponse, error) {
	r := b.Status.Response
	resp := bindingResponse{Credentials: map[string]any{}, Parameters: rawOf(b.Spec.Parameters), Endpoints: r.Endpoints,
		VolumeMounts: rawOf(r.VolumeMounts), SyslogDrainURL: r.SyslogDrainURL, RouteServiceURL: r.RouteServiceURL}
	if m := r.Metadata; m != nil {
		resp.Metadata = &bindingMetadata{ExpiresAt: m.ExpiresAt, RenewBefore: m.RenewBefore}
	}
	name := b.Status.Response.SecretRef
	if name == "" {
		return resp, nil
	}
	kube, err := s.clusterOf(ctx, b)
	if err != nil {
		return resp, err
	}
	var secret corev1.Secret
	if err := kube.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: name}, &secret); err != nil {
		return resp, fmt.Errorf("reading Secret %s/%s: %w", b.Namespace, name, err)
	}
	// The status names the Secret, and whoever may write the status could
	// name any Secret of the namespace: only the binding's own is read out.
	if kubenames.NameOf(&secret, osbv1alpha1.CredentialsBindingLabel) != b.Name {
		return resp, fmt.Errorf("the binding's status names Secret %s/%s, which is not labelled %s=%s as its credentials are: not returned",
			b.Namespace, name, osbv1alpha1.CredentialsBindingLabel, kubenames.LabelValue(b.Name))
	}
	jsonKeys := map[string]bool{}
	for _, k := range strings.Split(secret.Annotations[osbv1alpha1.CredentialsJSONKeysAnnotation], ",") {
		jsonKeys[k] = true
	}
	for k, v := range secret.Data {
		var decoded any
		if jsonKeys[k] && json.Unmarshal(v, &decoded) == nil {
			resp.Credentials[k] = decoded
		} else {
			resp.Credentials[k] = string(v)
		}
	}
	return resp, nil
}

// clusterOf reaches the cluster the binding's instance is scheduled on,
// where its credentials are.
func (s *Server) clusterOf(ctx context.Context, b *osbv1alpha1.SFServiceBinding) (client.Reader, error) {
	if s.Clusters == nil {
		return s.Kube, nil
	}
	var inst osbv1alpha1.SFServiceInstance
	if err := s.Kube.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.InstanceID}, &inst); err != nil {
		return nil, fmt.Errorf("reading instance %s of binding %s: %w", b.Spec.InstanceID, b.Name, err)
	}
	if clusters.IsLocal(inst.Spec.ClusterID) {
		return s.Kube, nil
	}
	c, err := s.Clusters.Get(ctx, b.Namespace, inst.Spec.ClusterID)
	if err != nil {
		return nil, err
	}
	return c.Client, nil
}

// sameBinding reports whether a bind request asks for what the binding
// records.
func sameBinding(have, want osbv1alpha1.SFServiceBindingSpec) bool {
	return have.InstanceID == want.InstanceID && have.ServiceID == want.ServiceID && have.PlanID == want.PlanID &&
		sameJSON(have.BindResource, want.BindResource) && sameJSON(have.Context, want.Context) &&
		sameJSON(have.Parameters, want.Parameters) && have.PredecessorBinding == want.PredecessorBinding
}

// predecessorName is the resource name of a predecessor_binding_id ("":
// none).
func (s *Server) predecessorName(ctx context.Context, id string) (string, *requestError) {
	if id == "" {
		return "", nil
	}
	return s.bindingName(ctx, s.Kube, id)
}
