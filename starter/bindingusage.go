package starter

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/workflows/runs"
)

// Indexes of the ServiceBindingUsages in the watcher's cache: by the
// UsageKind, the workload, the binding ("Kind/name") and the Secret they
// name, so that an event of any of those finds its usages.
const (
	usageKindField     = "spec.usedBy.kind"
	usageWorkloadField = "spec.usedBy.name"
	usageBindingField  = "spec.serviceBindingRef"
	usageSecretField   = "status.secret"
)

// BindingUsages starts each ServiceBindingUsage's workflow and signals it
// when there is something to look at again: the usage is new, changed or
// deleted; its UsageKind, its workload, its binding or the binding's Secret
// changed. Workloads are watched by metadata only, one watch per kind that
// a Ready UsageKind names; a change of their generation (someone's apply
// dropped the injection) or their re-creation wakes the usages that name
// them, which apply again. The UsageKinds' own status and protection are
// in usagekinds.go.
type BindingUsages struct {
	Client   ctrlclient.Client
	Temporal client.Client
	// WorkerServiceAccount is WatcherOptions'.
	WorkerServiceAccount string
	// Partial: the watcher watches some namespaces only
	// (WatcherOptions.Namespaces), so it cannot count a cluster-wide
	// UsageKind's usages: it leaves their count and the kind's protection
	// to a watcher that sees them all, instead of undoing what that one
	// wrote with a count of its own.
	Partial bool

	cache     cache.Cache
	usages    controller.Controller
	workloads kindWatches
	secrets   *bindingSecrets
}

// setupBindingUsages registers the usages' controller and the UsageKinds'.
func setupBindingUsages(mgr ctrl.Manager, secrets *bindingSecrets, tc client.Client, copts reconcilerOptions, opts WatcherOptions, keep *Loops) error {
	u := &BindingUsages{Client: mgr.GetClient(), Temporal: tc, WorkerServiceAccount: opts.WorkerServiceAccount, Partial: len(opts.Namespaces) > 0, cache: mgr.GetCache(),
		workloads: kindWatches{of: "the ServiceBindingUsages"}, secrets: secrets}
	keep.add(runKind{name: loops.BindingUsage, workflowType: runs.BindingUsageType,
		wants: func(ctx context.Context) ([]loops.Want, error) {
			return objectRuns(ctx, u.Client, &sc.ServiceBindingUsageList{}, runs.BindingUsageID, sc.UsageProtection, nil)
		},
		wake: byRequest(u.wake)})
	indexes := map[string]func(*sc.ServiceBindingUsage) string{
		usageKindField:     func(s *sc.ServiceBindingUsage) string { return s.Spec.UsedBy.Kind },
		usageWorkloadField: func(s *sc.ServiceBindingUsage) string { return s.Spec.UsedBy.Name },
		usageBindingField:  func(s *sc.ServiceBindingUsage) string { return bindingKey(s.Spec.ServiceBindingRef) },
		usageSecretField:   func(s *sc.ServiceBindingUsage) string { return s.Status.Secret },
	}
	if err := indexBy(mgr, &sc.ServiceBindingUsage{}, indexes); err != nil {
		return err
	}
	o := copts()
	o.Reconciler = reconcile.Func(u.wake)
	c, err := controller.New("servicebindingusage", mgr, o)
	if err != nil {
		return fmt.Errorf("registering the ServiceBindingUsage controller: %w", err)
	}
	u.usages = c
	bindingChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return secretOf(e.ObjectOld) != secretOf(e.ObjectNew) }}
	for _, src := range []source.Source{
		source.Kind[ctrlclient.Object](u.cache, &osbv1alpha1.SFServiceBinding{}, u.by(usageBindingField, bindingOf), bindingChanged),
		source.Kind[ctrlclient.Object](u.cache, &sc.ServiceBindingUsage{}, &handler.EnqueueRequestForObject{}, specOrDeletion),
		source.Kind[ctrlclient.Object](u.cache, &primazav1alpha1.ServiceClaim{}, u.by(usageBindingField, bindingOf), bindingChanged),
		source.Kind[ctrlclient.Object](u.cache, &sc.UsageKind{}, u.by(usageKindField, nameOf), predicate.GenerationChangedPredicate{}),
	} {
		if err := c.Watch(src); err != nil {
			return fmt.Errorf("watching for the ServiceBindingUsages: %w", err)
		}
	}
	err = secrets.read(c, secretReader{
		sources: func(in cache.Cache) []source.Source {
			return []source.Source{source.Kind[ctrlclient.Object](in, ctrlclient.Object(secretsMetadata()), u.by(usageSecretField, nameOf))}
		},
		byBinding: func(key func(ctrlclient.Object) string) handler.EventHandler { return u.by(usageBindingField, key) },
	})
	if err != nil {
		return fmt.Errorf("watching for the ServiceBindingUsages: %w", err)
	}
	return setupUsageKinds(mgr, u, copts)
}

// indexBy indexes the objects of obj's kind in the watcher's cache by each
// field of indexes (an empty value is not indexed).
func indexBy[T ctrlclient.Object](mgr ctrl.Manager, obj T, indexes map[string]func(T) string) error {
	for field, of := range indexes {
		err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, field, func(o ctrlclient.Object) []string {
			if v := of(o.(T)); v != "" {
				return []string{v}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("indexing %T by %s: %w", obj, field, err)
		}
	}
	return nil
}

// watchWorkloads starts the watch of a kind's workloads, once.
func (u *BindingUsages) watchWorkloads(gvk schema.GroupVersionKind) error {
	return u.workloads.ensure(u.usages, gvk, func() source.Source {
		workloads := &metav1.PartialObjectMetadata{}
		workloads.SetGroupVersionKind(gvk)
		return source.Kind[ctrlclient.Object](u.cache, ctrlclient.Object(workloads), u.by(usageWorkloadField, nameOf), predicate.GenerationChangedPredicate{})
	})
}

// by maps an object to the usages in its namespace whose field is key(obj).
func (u *BindingUsages) by(field string, key func(ctrlclient.Object) string) handler.EventHandler {
	return mapBy(u.Client, func() ctrlclient.ObjectList { return &sc.ServiceBindingUsageList{} }, field, key)
}

// mapBy maps an object to the objects of a list, in the object's namespace
// (every namespace for a cluster-wide object), whose indexed field is
// key(obj); an empty field maps it to all of them. An object whose key is
// empty maps to none.
func mapBy(c ctrlclient.Reader, newList func() ctrlclient.ObjectList, field string, key func(ctrlclient.Object) string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o ctrlclient.Object) []reconcile.Request {
		var opts []ctrlclient.ListOption
		if field != "" {
			k := key(o)
			if k == "" {
				return nil
			}
			opts = append(opts, ctrlclient.MatchingFields{field: k})
		}
		if o.GetNamespace() != "" {
			opts = append(opts, ctrlclient.InNamespace(o.GetNamespace()))
		}
		list := newList()
		if err := c.List(ctx, list, opts...); err != nil {
			log.FromContext(ctx).Error(err, "listing what an object maps to", "list", fmt.Sprintf("%T", list), "field", field)
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			obj := item.(ctrlclient.Object)
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}})
			return nil
		})
		return out
	})
}

func nameOf(o ctrlclient.Object) string { return o.GetName() }

func bindingKey(ref sc.BindingReference) string {
	kind := ref.Kind
	if kind == "" {
		kind = sc.BindingKindSFServiceBinding
	}
	return kind + "/" + ref.Name
}

// bindingOf is the key of an SFServiceBinding or a ServiceClaim in the
// usages' binding index.
func bindingOf(o ctrlclient.Object) string {
	switch o.(type) {
	case *osbv1alpha1.SFServiceBinding:
		return bindingKey(sc.BindingReference{Kind: sc.BindingKindSFServiceBinding, Name: o.GetName()})
	case *primazav1alpha1.ServiceClaim:
		return bindingKey(sc.BindingReference{Kind: sc.BindingKindServiceClaim, Name: o.GetName()})
	}
	return ""
}

// secretOf is the Secret a binding's credentials are in.
func secretOf(o ctrlclient.Object) string {
	switch b := o.(type) {
	case *osbv1alpha1.SFServiceBinding:
		return b.Status.Response.SecretRef
	case *primazav1alpha1.ServiceClaim:
		if b.Status.Binding != nil {
			return b.Status.Binding.Name
		}
	}
	return ""
}

// wake signals the workflow of an existing usage, starting it if it does
// not run.
func (u *BindingUsages) wake(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var usage sc.ServiceBindingUsage
	if err := u.Client.Get(ctx, req.NamespacedName, &usage); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if err := u.secrets.ensure(req.Namespace); err != nil {
		return ctrl.Result{}, err
	}
	id := runs.BindingUsageID(req.Namespace, req.Name)
	_, err := u.Temporal.SignalWithStartWorkflow(ctx, id, runs.SignalUsageChanged, "", runs.LoopOptions(id, req.Namespace, fairness.Follow,
		fmt.Sprintf("binding usage %s/%s: %s into %s %s", req.Namespace, req.Name, usage.Spec.ServiceBindingRef.Name, usage.Spec.UsedBy.Kind, usage.Spec.UsedBy.Name),
		fmt.Sprintf("kubectl get servicebindingusage %s -n %s -o yaml", req.Name, req.Namespace),
	), runs.BindingUsageType, runs.UsageTarget{Namespace: req.Namespace, Name: req.Name})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("signalling the workflow of ServiceBindingUsage %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
