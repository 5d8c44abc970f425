package starter

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxInstancesAnnotation on a namespace bounds how many SFServiceInstances
// it may hold: the watcher keeps a ResourceQuota of that many
// (InstanceQuotaName), so that the API server itself refuses one more,
// whoever creates it. Removing the annotation removes the quota.
const MaxInstancesAnnotation = "quartermaster.io/max-instances"

// InstanceQuotaName is the ResourceQuota the watcher keeps in a namespace
// with MaxInstancesAnnotation.
const InstanceQuotaName = "quartermaster-instances"

// InstanceQuotaOwner is the field manager of those quotas.
const InstanceQuotaOwner = "qm-watcher-instance-limits"

// The label of the quotas the watcher wrote, and so may delete.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "quartermaster"
)

// instanceCount is the quota's resource: Kubernetes' object count of
// SFServiceInstances.
const instanceCount corev1.ResourceName = "count/sfserviceinstances.osb.servicefabrik.io"

// instanceLimits keeps each annotated namespace's instance quota.
type instanceLimits struct {
	client ctrlclient.Client
	// namespaces are the watcher's (all when empty).
	namespaces []string
}

func setupInstanceLimits(mgr ctrl.Manager, namespaces []string, copts reconcilerOptions) error {
	l := &instanceLimits{client: mgr.GetClient(), namespaces: namespaces}
	limit := func(o ctrlclient.Object) (string, bool) {
		v, ok := o.GetAnnotations()[MaxInstancesAnnotation]
		return v, ok
	}
	// A new namespace matters when it is annotated; another only when the
	// annotation changes. Its quota goes with a deleted namespace.
	changed := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { _, ok := limit(e.Object); return ok },
		UpdateFunc: func(e event.UpdateEvent) bool {
			was, had := limit(e.ObjectOld)
			is, has := limit(e.ObjectNew)
			return was != is || had != has
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	err := ctrl.NewControllerManagedBy(mgr).Named("instance-limits").
		For(&corev1.Namespace{}, builder.WithPredicates(changed)).
		WithOptions(copts()).Complete(reconcile.Func(l.reconcile))
	if err != nil {
		return fmt.Errorf("registering the instance limits: %w", err)
	}
	return nil
}

// reconcile writes the namespace's quota from its annotation, or deletes
// the quota it wrote once the annotation is gone. A value that is not a
// number of instances is logged, and changes nothing.
func (l *instanceLimits) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if len(l.namespaces) > 0 && !slices.Contains(l.namespaces, req.Name) {
		return ctrl.Result{}, nil
	}
	var ns corev1.Namespace
	if err := l.client.Get(ctx, req.NamespacedName, &ns); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	value, ok := ns.Annotations[MaxInstancesAnnotation]
	if !ok {
		// Only a quota the watcher wrote: one of the same name that a
		// user wrote is theirs.
		err := l.client.DeleteAllOf(ctx, &corev1.ResourceQuota{}, ctrlclient.InNamespace(ns.Name),
			ctrlclient.MatchingFields{"metadata.name": InstanceQuotaName}, ctrlclient.MatchingLabels{managedByLabel: managedBy})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("deleting the instance quota of namespace %s: %w", ns.Name, err)
		}
		return ctrl.Result{}, nil
	}
	max, err := strconv.ParseInt(value, 10, 32)
	if err != nil || max < 0 {
		log.FromContext(ctx).Info("ignoring an instance limit that is not a number of instances",
			"namespace", ns.Name, "annotation", MaxInstancesAnnotation, "value", value)
		return ctrl.Result{}, nil
	}
	quota := corev1ac.ResourceQuota(InstanceQuotaName, ns.Name).
		WithLabels(map[string]string{managedByLabel: managedBy}).
		WithSpec(corev1ac.ResourceQuotaSpec().WithHard(corev1.ResourceList{instanceCount: *resource.NewQuantity(max, resource.DecimalSI)}))
	if err := l.client.Apply(ctx, quota, ctrlclient.FieldOwner(InstanceQuotaOwner), ctrlclient.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the instance quota of namespace %s: %w", ns.Name, err)
	}
	return ctrl.Result{}, nil
}
