package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/sharding"
)

// record creates obj, the record of an OSB request, or reads the one that
// an earlier request with the same ID created, into obj. It refuses one
// that is being removed, or that same says differs from the request.
//
// A new record's status stays empty until its run writes it, as one a
// kubectl user creates does: every reader (the watcher, last_operation,
// the admin API) takes an empty state for in_queue, so that writing
// in_queue would be a second write to the API server in each request, and
// under load each write is a round trip of hundreds of milliseconds.
func (s *Server) record(ctx context.Context, obj client.Object, what, removal string, same func() bool) (created bool, e *requestError) {
	// Labelled with its bucket from the start, so that the watcher shard
	// that owns it sees it at once and no one has to stamp it.
	sharding.Stamp(obj)
	err := s.Kube.Create(ctx, obj)
	if err == nil {
		return true, nil
	}
	if e := quotaRefusal(what, err); e != nil {
		return false, e
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, failure("recording "+what, err)
	}
	if err := s.Kube.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return false, failure("reading "+what, err)
	}
	switch {
	case obj.GetDeletionTimestamp() != nil:
		return false, concurrencyError("%s is being %s", what, removal)
	case !same():
		return false, &requestError{status: http.StatusConflict, description: what + " already exists with different attributes"}
	}
	return false, nil
}

// remove deletes obj, the record of an OSB instance or binding, and reads
// it back into obj: its finalizer holds it until the workflow has removed
// what it created. ended is the reply when there is nothing to wait for:
// 410 when it was gone already, 200 when nothing held it.
func (s *Server) remove(ctx context.Context, obj client.Object, what, identity string) (ended int, e *requestError) {
	uid := obj.GetUID()
	if err := s.Kube.Delete(ctx, obj, client.Preconditions{UID: &uid}); apierrors.IsNotFound(err) {
		return http.StatusGone, nil
	} else if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "protected from deletion") {
		// Protected since the request read it: the admission policy's words.
		return 0, &requestError{status: http.StatusUnprocessableEntity, description: err.Error()}
	} else if err != nil {
		return 0, failure("deleting "+what, err)
	}
	s.recordRemoval(ctx, obj, identity)
	if err := s.Kube.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return http.StatusOK, nil
	} else if err != nil {
		return 0, failure("reading "+what, err)
	}
	return 0, nil
}

// sameInstance reports whether a provision request asks for what the
// instance records: the same IDs, organization, space, context, parameters
// and maintenance_info.
func sameInstance(have, want osbv1alpha1.SFServiceInstanceSpec) bool {
	return have.ServiceID == want.ServiceID && have.PlanID == want.PlanID &&
		have.OrganizationGUID == want.OrganizationGUID && have.SpaceGUID == want.SpaceGUID &&
		sameJSON(have.Context, want.Context) && sameJSON(have.Parameters, want.Parameters) &&
		sameMaintenanceInfo(have.MaintenanceInfo, want.MaintenanceInfo)
}

func sameMaintenanceInfo(a, b *osbv1alpha1.MaintenanceInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Version == b.Version
}

// checkRemovalIDs refuses a DELETE whose service_id or plan_id query
// parameter is not the resource's: the platform asks to remove something
// other than what is there.
func checkRemovalIDs(q url.Values, what, serviceID, planID string) *requestError {
	if got := q.Get("service_id"); got != serviceID {
		return badRequest("service_id %q is not the service of %s (%q)", got, what, serviceID)
	}
	if got := q.Get("plan_id"); got != planID {
		return badRequest("plan_id %q is not the plan of %s (%q)", got, what, planID)
	}
	return nil
}

// recordRemoval records who asked for a removal, from the request's
// X-Broker-API-Originating-Identity, as an Event on the resource: `kubectl
// describe` shows it beside the resource's own story. The resource may be
// gone by the time it is read; a failure to record is logged, not answered.
func (s *Server) recordRemoval(ctx context.Context, obj client.Object, identity string) {
	if identity == "" {
		return
	}
	gvk, err := apiutil.GVKForObject(obj, s.Kube.Scheme())
	if err != nil {
		s.Logger.Warn("recording a removal's originating identity", "error", err)
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: obj.GetName() + ".", Namespace: obj.GetNamespace()},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(),
		},
		Reason:              "RemovalRequested",
		Message:             "removal requested through the OSB API by " + identity,
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: "qm-api"},
		ReportingController: "quartermaster.io/api",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if err := s.Kube.Create(ctx, ev); err != nil {
		s.Logger.Warn("recording a removal's originating identity", "error", err)
	}
}
