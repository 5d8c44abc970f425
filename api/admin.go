package api

import (
	"fmt"
	"mime"
	"net/http"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// adminInstance is how the admin API shows an instance: enough to find its
// runs in the Temporal UI.
type adminInstance struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	InstanceID  string `json:"instance_id"`
	ServiceID   string `json:"service_id"`
	PlanID      string `json:"plan_id"`
	State       string `json:"state"`
	Description string `json:"description,omitempty"`
	Operation   string `json:"operation"`
	WorkflowID  string `json:"workflow_id"`
	Deleting    bool   `json:"deleting,omitempty"`
}

// admin is the user the admin API authenticated r as (basicAuth let it
// through).
func admin(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return user
}

// adminEnabled answers 404 for the whole admin API when it has no
// credentials, rather than serving it unprotected.
func (s *Server) adminEnabled(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Admin.Username == "" || s.Admin.Password == "" {
			writeError(w, http.StatusNotFound, "", "the admin API is off; set QM_ADMIN_USERNAME and QM_ADMIN_PASSWORD to turn it on")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonOnly refuses an admin request that changes something unless it says
// its body is JSON, even one with no body (the steering posts). A page in
// an operator's browser can send a form or text/plain post with the
// browser's remembered credentials and no preflight; a JSON one needs the
// preflight, which this API never answers, so the page cannot start, pause
// or cancel a mass update.
func jsonOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "",
					fmt.Sprintf("the admin API takes application/json only, not %q (a form or a plain-text post, which any web page can send, is refused)", r.Header.Get("Content-Type")))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// adminListInstances lists every SFServiceInstance, or those of the
// namespace the query parameter names, whether made by OSB or kubectl.
func (s *Server) adminListInstances(w http.ResponseWriter, r *http.Request) {
	var list osbv1alpha1.SFServiceInstanceList
	var opts []client.ListOption
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := s.Kube.List(r.Context(), &list, opts...); err != nil {
		s.internalError(w, r, "listing instances", err)
		return
	}
	out := struct {
		Instances []adminInstance `json:"instances"`
	}{Instances: make([]adminInstance, 0, len(list.Items))}
	for i := range list.Items {
		out.Instances = append(out.Instances, toAdminInstance(&list.Items[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// adminGetInstance shows one instance by namespace and name.
func (s *Server) adminGetInstance(w http.ResponseWriter, r *http.Request) {
	key := types.NamespacedName{Namespace: chi.URLParam(r, "namespace"), Name: chi.URLParam(r, "name")}
	var inst osbv1alpha1.SFServiceInstance
	if err := s.Kube.Get(r.Context(), key, &inst); apierrors.IsNotFound(err) {
		writeError(w, http.StatusNotFound, "", "instance "+key.String()+" does not exist")
		return
	} else if err != nil {
		s.internalError(w, r, "reading instance "+key.String(), err)
		return
	}
	writeJSON(w, http.StatusOK, toAdminInstance(&inst))
}

func toAdminInstance(inst *osbv1alpha1.SFServiceInstance) adminInstance {
	state := string(inst.Status.State)
	if state == "" {
		state = string(osbv1alpha1.StateInQueue)
	}
	return adminInstance{
		Namespace: inst.Namespace, Name: inst.Name, InstanceID: inst.Spec.InstanceID,
		ServiceID: inst.Spec.ServiceID, PlanID: inst.Spec.PlanID,
		State: state, Description: inst.Status.Description, Operation: instanceOperation(inst),
		WorkflowID: runs.WorkflowID(lifecycle.InstanceTarget(inst)),
		Deleting:   inst.DeletionTimestamp != nil,
	}
}
