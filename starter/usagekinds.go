package starter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
)

// unresolvedRetry is how often a UsageKind whose resource is not served
// is looked at again: a CRD installed later resolves it.
const unresolvedRetry = 30 * time.Second

// setupUsageKinds registers the UsageKinds' controller, woken by the kinds
// and by the usages that name them.
func setupUsageKinds(mgr ctrl.Manager, u *BindingUsages, copts reconcilerOptions) error {
	kindOf := func(o ctrlclient.Object) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Name: o.(*sc.ServiceBindingUsage).Spec.UsedBy.Kind}}
	}
	usages := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(kindOf(e.Object))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(kindOf(e.ObjectOld))
			q.Add(kindOf(e.ObjectNew))
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(kindOf(e.Object))
		},
	}
	err := ctrl.NewControllerManagedBy(mgr).For(&sc.UsageKind{}).Named("usagekind").
		Watches(&sc.ServiceBindingUsage{}, usages).
		WithOptions(copts()).Complete(reconcile.Func(u.ReconcileKind))
	if err != nil {
		return fmt.Errorf("registering the UsageKind controller: %w", err)
	}
	return nil
}

// ReconcileKind keeps a UsageKind's status (does its resource resolve, may
// Quartermaster work on it) and its protection finalizer (held while a
// usage names it, as in Kyma), and starts the watch of its workloads once
// it is Ready. A Partial watcher writes neither the count of usages nor the
// protection: it sees only its namespaces' usages.
func (u *BindingUsages) ReconcileKind(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var kind sc.UsageKind
	if err := u.Client.Get(ctx, req.NamespacedName, &kind); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	var usages sc.ServiceBindingUsageList
	if err := u.Client.List(ctx, &usages, ctrlclient.MatchingFields{usageKindField: kind.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the usages of UsageKind %s: %w", kind.Name, err)
	}
	inUse := len(usages.Items) > 0
	flip := !u.Partial && inUse != controllerutil.ContainsFinalizer(&kind, sc.UsageKindProtection)
	if flip && (!inUse || kind.DeletionTimestamp.IsZero()) {
		patch := ctrlclient.MergeFromWithOptions(kind.DeepCopy(), ctrlclient.MergeFromWithOptimisticLock{})
		if inUse {
			controllerutil.AddFinalizer(&kind, sc.UsageKindProtection)
		} else {
			controllerutil.RemoveFinalizer(&kind, sc.UsageKindProtection)
		}
		if err := u.Client.Patch(ctx, &kind, patch); err != nil {
			return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
		}
	}
	if !kind.DeletionTimestamp.IsZero() && !inUse {
		return ctrl.Result{}, nil
	}
	base := kind.DeepCopy()
	kind.Status.ObservedGeneration = kind.Generation
	if !u.Partial {
		kind.Status.Usages = len(usages.Items)
	}
	ready := metav1.Condition{Type: sc.UsageKindReady, Status: metav1.ConditionFalse, ObservedGeneration: kind.Generation}
	result := ctrl.Result{}
	mapping, err := bindingusage.Resolve(u.Client.RESTMapper(), kind.Spec.Resource)
	if err != nil {
		setCondition(&kind, sc.UsageKindResolved, "NotServed", err.Error())
		meta.RemoveStatusCondition(&kind.Status.Conditions, sc.UsageKindPermitted)
		kind.Status.Resource = ""
		ready.Reason, ready.Message = "NotServed", err.Error()
		result.RequeueAfter = unresolvedRetry
	} else {
		kind.Status.Resource = mapping.Resource.GroupResource().String()
		setCondition(&kind, sc.UsageKindResolved, "", fmt.Sprintf("served as %s, kind %s", mapping.Resource.GroupVersion(), mapping.GroupVersionKind.Kind))
		missing, err := u.access(ctx, mapping.Resource)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(missing) > 0 {
			msg := "Quartermaster lacks the RBAC rules " + strings.Join(missing, "; ")
			setCondition(&kind, sc.UsageKindPermitted, "Forbidden", msg)
			ready.Reason, ready.Message = "Forbidden", msg
			result.RequeueAfter = unresolvedRetry
		} else {
			setCondition(&kind, sc.UsageKindPermitted, "", "may "+strings.Join(bindingusage.Verbs, ", ")+" "+kind.Status.Resource)
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "Permitted", fmt.Sprintf("bindings can be injected into %s", kind.Status.Resource)
			if err := u.watchWorkloads(mapping.GroupVersionKind); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	meta.SetStatusCondition(&kind.Status.Conditions, ready)
	if !equality.Semantic.DeepEqual(base.Status, kind.Status) {
		if err := u.Client.Status().Patch(ctx, &kind, ctrlclient.MergeFrom(base)); err != nil {
			return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
		}
	}
	return result, nil
}

// setCondition sets a condition of a UsageKind: True without a reason,
// False with one.
func setCondition(kind *sc.UsageKind, typ, reason, message string) {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, Message: message, ObservedGeneration: kind.Generation}
	if reason != "" {
		c.Status, c.Reason = metav1.ConditionFalse, reason
	}
	meta.SetStatusCondition(&kind.Status.Conditions, c)
}

// access lists the RBAC rules missing for Quartermaster to work on a
// UsageKind's resource: the watcher lists and watches it, the workers get
// and patch it, under their own service account when they have one.
func (u *BindingUsages) access(ctx context.Context, gvr schema.GroupVersionResource) ([]string, error) {
	if u.WorkerServiceAccount == "" {
		return bindingusage.Access(ctx, u.Client, gvr, "", "")
	}
	missing, err := bindingusage.AccessOf(ctx, u.Client, gvr, "", "", bindingusage.WatchVerbs)
	if err != nil {
		return nil, err
	}
	forWorker, err := bindingusage.AccessOf(ctx, u.Client, gvr, "", u.WorkerServiceAccount, bindingusage.InjectVerbs)
	if err != nil {
		return nil, err
	}
	for _, rule := range forWorker {
		missing = append(missing, rule+" for the workers' service account "+u.WorkerServiceAccount)
	}
	return missing, nil
}
