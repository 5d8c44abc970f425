package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
)

// The two endpoints of Kyma's "UI API layer": a console offers binding
// injection from them. Both read the API server, not a cache: the API runs
// apart from the watcher, a console asks rarely, and a page of a list must
// come with the API server's continue token.

// usageKindView is how the admin API shows a UsageKind.
type usageKindView struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Kind        string `json:"kind"`
	// Resource is the plural resource the watcher resolved the kind to.
	Resource string `json:"resource,omitempty"`
	Ready    bool   `json:"ready"`
	// Reason is why the kind is not ready (the Ready condition's message).
	Reason string `json:"reason,omitempty"`
}

// usageTarget is a resource of a usage kind that a binding can be injected
// into.
type usageTarget struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               types.UID         `json:"uid"`
	Labels            map[string]string `json:"labels,omitempty"`
	CreationTimestamp metav1.Time       `json:"creation_timestamp"`
}

// page is a page of a list, with the API server's token for the next one.
type page[T any] struct {
	Items    []T    `json:"items"`
	Continue string `json:"continue,omitempty"`
}

// adminListUsageKinds serves GET /admin/usagekinds: every UsageKind, with
// its display name and whether it is Ready.
func (s *Server) adminListUsageKinds(w http.ResponseWriter, r *http.Request) {
	opts, e := pagination(r)
	if e != nil {
		writeError(w, e.status, "", e.description)
		return
	}
	var list sc.UsageKindList
	if err := s.Kube.List(r.Context(), &list, opts...); err != nil {
		s.listError(w, r, "listing usage kinds", err)
		return
	}
	out := page[usageKindView]{Items: make([]usageKindView, 0, len(list.Items)), Continue: list.Continue}
	for i := range list.Items {
		out.Items = append(out.Items, toUsageKindView(&list.Items[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// adminListUsageTargets serves GET /admin/usagekinds/{name}/resources:
// the resources of the kind in a namespace, less those another object owns
// (a Deployment's ReplicaSets, a Function's Deployment): a user binds to
// the owner. A page may therefore hold fewer items than its limit.
func (s *Server) adminListUsageTargets(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), chi.URLParam(r, "name")
	namespace := r.URL.Query().Get("namespace")
	if namespace == "" {
		writeError(w, http.StatusBadRequest, "", "the query parameter namespace is required")
		return
	}
	opts, e := pagination(r)
	if e != nil {
		writeError(w, e.status, "", e.description)
		return
	}
	var kind sc.UsageKind
	if err := s.Kube.Get(ctx, client.ObjectKey{Name: name}, &kind); apierrors.IsNotFound(err) {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("usage kind %q does not exist", name))
		return
	} else if err != nil {
		s.internalError(w, r, "reading usage kind "+name, err)
		return
	}
	mapping, err := bindingusage.Resolve(s.Kube.RESTMapper(), kind.Spec.Resource)
	if err != nil {
		writeError(w, http.StatusConflict, "", fmt.Sprintf("usage kind %q cannot be listed: %v", name, err))
		return
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(mapping.GroupVersionKind.GroupVersion().WithKind(mapping.GroupVersionKind.Kind + "List"))
	if err := s.Kube.List(ctx, list, append(opts, client.InNamespace(namespace))...); err != nil {
		s.listError(w, r, fmt.Sprintf("listing %s in %s", mapping.Resource.GroupResource(), namespace), err)
		return
	}
	out := page[usageTarget]{Items: []usageTarget{}, Continue: list.Continue}
	for _, obj := range list.Items {
		if len(obj.OwnerReferences) > 0 {
			continue
		}
		out.Items = append(out.Items, usageTarget{Name: obj.Name, Namespace: obj.Namespace, UID: obj.UID,
			Labels: obj.Labels, CreationTimestamp: obj.CreationTimestamp})
	}
	writeJSON(w, http.StatusOK, out)
}

// pagination reads the Kubernetes list options a page is asked with:
// limit (a positive number) and continue (the token of the page before).
func pagination(r *http.Request) ([]client.ListOption, *requestError) {
	var opts []client.ListOption
	q := r.URL.Query()
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil || n < 1 {
			return nil, badRequest("limit %q is not a positive number", l)
		}
		opts = append(opts, client.Limit(n))
	}
	if c := q.Get("continue"); c != "" {
		opts = append(opts, client.Continue(c))
	}
	return opts, nil
}

// listError answers a list the API server refused with what it said: an
// expired or malformed continue token is the caller's to fix.
func (s *Server) listError(w http.ResponseWriter, r *http.Request, doing string, err error) {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		writeError(w, http.StatusGone, "", doing+": the continue token has expired; list again from the start")
	case apierrors.IsBadRequest(err):
		writeError(w, http.StatusBadRequest, "", doing+": "+err.Error())
	default:
		s.internalError(w, r, doing, err)
	}
}

func toUsageKindView(k *sc.UsageKind) usageKindView {
	v := usageKindView{Name: k.Name, DisplayName: k.Spec.DisplayName, Group: k.Spec.Resource.Group,
		Version: k.Spec.Resource.Version, Kind: k.Spec.Resource.Kind, Resource: k.Status.Resource}
	ready := meta.FindStatusCondition(k.Status.Conditions, sc.UsageKindReady)
	switch {
	case ready == nil || ready.ObservedGeneration != k.Generation:
		v.Reason = "the watcher has not checked it yet"
	case ready.Status == metav1.ConditionTrue:
		v.Ready = true
	default:
		v.Reason = ready.Message
	}
	return v
}
