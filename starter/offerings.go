package starter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/tenancy"
)

// Field indexes of the watcher's cache.
const (
	serviceIDField     = "spec.id"
	planIDField        = "spec.id"
	planServiceIDField = "spec.serviceId"
)

// OfferingStatus keeps the Ready condition of SFServices and SFPlans, so
// that `kubectl get sfplans` shows a broken plan when it is registered
// rather than when the first provision fails, and a tenant's copy of a
// catalog ID as not served.
type OfferingStatus struct {
	Client  ctrlclient.Client
	Catalog tenancy.Boundary
}

// ReasonShadowsCatalog is the Ready reason of a tenant's SFPlan or
// SFService whose ID a catalog one has: the catalog's is served.
const ReasonShadowsCatalog = "ShadowsCatalog"

// indexOfferings registers the SFService and SFPlan indexes, on every
// shard: each names the plans of the runs it starts, and weighs them.
func indexOfferings(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &osbv1alpha1.SFService{}, serviceIDField, func(o ctrlclient.Object) []string {
		return []string{o.(*osbv1alpha1.SFService).Spec.ID}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &osbv1alpha1.SFPlan{}, planIDField, func(o ctrlclient.Object) []string {
		return []string{o.(*osbv1alpha1.SFPlan).Spec.ID}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &osbv1alpha1.SFPlan{}, planServiceIDField, func(o ctrlclient.Object) []string {
		return []string{o.(*osbv1alpha1.SFPlan).Spec.ServiceID}
	}); err != nil {
		return err
	}
	return nil
}

// setupOfferingStatus registers the SFService and SFPlan reconcilers.
func setupOfferingStatus(mgr ctrl.Manager, catalog tenancy.Boundary) error {
	c := &OfferingStatus{Client: mgr.GetClient(), Catalog: catalog}
	// A plan is looked at again when its service comes or goes.
	plansOf := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o ctrlclient.Object) []reconcile.Request {
		var plans osbv1alpha1.SFPlanList
		if err := c.Client.List(ctx, &plans, ctrlclient.MatchingFields{planServiceIDField: o.(*osbv1alpha1.SFService).Spec.ID}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(plans.Items))
		for _, p := range plans.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(&p)})
		}
		return reqs
	})
	// A plan is looked at again when another of its ID comes or goes: a
	// catalog plan shadows a tenant's copy.
	sameID := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o ctrlclient.Object) []reconcile.Request {
		var plans osbv1alpha1.SFPlanList
		if err := c.Client.List(ctx, &plans, ctrlclient.MatchingFields{planIDField: o.(*osbv1alpha1.SFPlan).Spec.ID}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for _, p := range plans.Items {
			if p.UID != o.GetUID() {
				reqs = append(reqs, reconcile.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(&p)})
			}
		}
		return reqs
	})
	servicesOf := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o ctrlclient.Object) []reconcile.Request {
		var services osbv1alpha1.SFServiceList
		if err := c.Client.List(ctx, &services, ctrlclient.MatchingFields{serviceIDField: o.(*osbv1alpha1.SFService).Spec.ID}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for _, s := range services.Items {
			if s.UID != o.GetUID() {
				reqs = append(reqs, reconcile.Request{NamespacedName: ctrlclient.ObjectKeyFromObject(&s)})
			}
		}
		return reqs
	})
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFPlan{}).Named("sfplan").
		Watches(&osbv1alpha1.SFService{}, plansOf).Watches(&osbv1alpha1.SFPlan{}, sameID).Complete(reconcile.Func(c.ReconcilePlan)); err != nil {
		return fmt.Errorf("registering the SFPlan reconciler: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFService{}).Named("sfservice").
		Watches(&osbv1alpha1.SFService{}, servicesOf).Complete(reconcile.Func(c.ReconcileService)); err != nil {
		return fmt.Errorf("registering the SFService reconciler: %w", err)
	}
	return nil
}

// ReconcilePlan marks a plan Ready when its service is registered and its
// templates parse, and not Ready with the reason otherwise.
func (c *OfferingStatus) ReconcilePlan(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sfplan osbv1alpha1.SFPlan
	if err := c.Client.Get(ctx, req.NamespacedName, &sfplan); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	cond := metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "the service is registered and every template parses"}
	if !c.Catalog.Trusted(sfplan.Namespace) {
		id, _ := c.Catalog.ActsAs(sfplan.Namespace, sfplan.Spec.ServiceAccountName) // a tenant's plan always acts as one
		cond.Message = fmt.Sprintf("a tenant's plan: it serves the instances of namespace %s and is applied as ServiceAccount %s; the service is registered and every template parses",
			sfplan.Namespace, id)
	}
	var services osbv1alpha1.SFServiceList
	if err := c.Client.List(ctx, &services, ctrlclient.MatchingFields{serviceIDField: sfplan.Spec.ServiceID}); err != nil {
		return ctrl.Result{}, err
	}
	served := tenancy.Served(c.Catalog, sfplan.Namespace, services.Items, func(s osbv1alpha1.SFService) string { return s.Namespace })
	shadow, err := c.catalogPlan(ctx, &sfplan)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := plan.Check(&sfplan); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidTemplate", err.Error()
	} else if shadow != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonShadowsCatalog,
			fmt.Sprintf("not served: the catalog's SFPlan %s/%s has spec.id %q, and a catalog plan's ID is never a tenant's", shadow.Namespace, shadow.Name, sfplan.Spec.ID)
	} else if len(served) == 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "UnknownService",
			fmt.Sprintf("no SFService has spec.id %q", sfplan.Spec.ServiceID)
	}
	base := sfplan.DeepCopy()
	cond.ObservedGeneration = sfplan.Generation
	changed := meta.SetStatusCondition(&sfplan.Status.Conditions, cond)
	hash, err := specHash(sfplan.Spec)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !changed && sfplan.Status.ObservedGeneration == sfplan.Generation && sfplan.Status.SpecHash == hash {
		return ctrl.Result{}, nil
	}
	sfplan.Status.ObservedGeneration, sfplan.Status.SpecHash = sfplan.Generation, hash
	return ctrl.Result{}, ctrlclient.IgnoreNotFound(c.Client.Status().Patch(ctx, &sfplan, ctrlclient.MergeFrom(base)))
}

// catalogPlan is the catalog's plan that a tenant's plan repeats the ID
// of, or nil: a catalog plan, or a tenant's of an ID of its own.
func (c *OfferingStatus) catalogPlan(ctx context.Context, p *osbv1alpha1.SFPlan) (*osbv1alpha1.SFPlan, error) {
	if c.Catalog.Trusted(p.Namespace) {
		return nil, nil
	}
	var plans osbv1alpha1.SFPlanList
	if err := c.Client.List(ctx, &plans, ctrlclient.MatchingFields{planIDField: p.Spec.ID}); err != nil {
		return nil, err
	}
	for i := range plans.Items {
		if c.Catalog.Trusted(plans.Items[i].Namespace) {
			return &plans.Items[i], nil
		}
	}
	return nil, nil
}

// ReconcileService marks a registered service Ready: served in the
// catalog, or a tenant's, or a tenant's copy of a catalog ID, not served.
func (c *OfferingStatus) ReconcileService(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var svc osbv1alpha1.SFService
	if err := c.Client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	cond := metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Registered",
		Message: "served in the catalog", ObservedGeneration: svc.Generation}
	if !c.Catalog.Trusted(svc.Namespace) {
		cond.Message = fmt.Sprintf("a tenant's service: its plans serve the instances of namespace %s, and the OSB catalog does not list it", svc.Namespace)
		var services osbv1alpha1.SFServiceList
		if err := c.Client.List(ctx, &services, ctrlclient.MatchingFields{serviceIDField: svc.Spec.ID}); err != nil {
			return ctrl.Result{}, err
		}
		for _, s := range services.Items {
			if c.Catalog.Trusted(s.Namespace) {
				cond.Status, cond.Reason = metav1.ConditionFalse, ReasonShadowsCatalog
				cond.Message = fmt.Sprintf("not served: the catalog's SFService %s/%s has spec.id %q, and a catalog service's ID is never a tenant's", s.Namespace, s.Name, svc.Spec.ID)
				break
			}
		}
	}
	base := svc.DeepCopy()
	changed := meta.SetStatusCondition(&svc.Status.Conditions, cond)
	if !changed && svc.Status.ObservedGeneration == svc.Generation {
		return ctrl.Result{}, nil
	}
	svc.Status.ObservedGeneration = svc.Generation
	return ctrl.Result{}, ctrlclient.IgnoreNotFound(c.Client.Status().Patch(ctx, &svc, ctrlclient.MergeFrom(base)))
}

// specHash is the digest of a plan's spec that its status records.
func specHash(spec osbv1alpha1.SFPlanSpec) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the plan's spec: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16]), nil
}
