package api

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/rotation"
)

// rotate checks a bind request that names a predecessor_binding_id
// (rotation.Check) and fills in what the platform no longer keeps: the
// predecessor's parameters, context and bind_resource, where the request
// gives none. A retry of a rotation already recorded is filled from that
// record, so that it is answered alike even after the predecessor was
// unbound.
func (s *Server) rotate(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, plan *osbv1alpha1.SFPlan, bid string, req *bindRequest) *requestError {
	predName, e := s.predecessorName(ctx, req.PredecessorBindingID)
	if e != nil {
		return e
	}
	name, e := s.bindingName(ctx, s.Kube, bid)
	if e != nil {
		return e
	}
	var have osbv1alpha1.SFServiceBinding
	err := s.Kube.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &have)
	switch {
	case err == nil && have.Spec.ID == bid && have.Spec.PredecessorBinding == predName:
		return req.inherit(have.Spec)
	case err != nil && !apierrors.IsNotFound(err):
		return failure("reading binding "+strconv.Quote(bid), err)
	}
	var pred *osbv1alpha1.SFServiceBinding
	var got osbv1alpha1.SFServiceBinding
	err = s.Kube.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: predName}, &got)
	switch {
	case err == nil && got.Spec.ID == req.PredecessorBindingID:
		pred = &got
	case err != nil && !apierrors.IsNotFound(err):
		return failure("reading predecessor binding "+strconv.Quote(req.PredecessorBindingID), err)
	}
	b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: osbv1alpha1.SFServiceBindingSpec{ID: bid, InstanceID: inst.Name, PredecessorBinding: predName}}
	if err := rotation.Check(plan, b, pred); err != nil {
		var refusal *rotation.Refusal
		if errors.As(err, &refusal) {
			return badRequest("%s", err.Error())
		}
		return failure("checking the rotation", err)
	}
	return req.inherit(pred.Spec)
}

// inherit fills the parameters, context and bind_resource the request
// leaves out from spec, a predecessor's or the recorded rotation's.
func (b *bindRequest) inherit(spec osbv1alpha1.SFServiceBindingSpec) *requestError {
	if len(b.Parameters) == 0 && spec.Parameters != nil {
		b.Parameters = spec.Parameters.Raw
	}
	if len(b.Context) == 0 && spec.Context != nil {
		b.Context = spec.Context.Raw
	}
	if b.BindResource == nil && spec.BindResource != nil {
		var r bindResource
		if err := json.Unmarshal(spec.BindResource.Raw, &r); err != nil {
			return failure("reading the predecessor's bind_resource", err)
		}
		b.BindResource = &r
	}
	if b.appGUID() == "" {
		b.AppGUID = spec.AppGUID
	}
	return nil
}
