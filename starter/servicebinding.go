package starter

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/internal/servicebinding"
	"github.com/quartermaster/qm/workflows/runs"
)

// Indexes of the ServiceBindings in the watcher's cache: by the service
// ("Kind/name"), the Secret they project and the workloads' kind
// ("apiVersion/Kind"), so that an event of any of those finds them.
const (
	sbServiceField      = "spec.service"
	sbSecretField       = "status.binding.name"
	sbWorkloadKindField = "spec.workload.kind"
)

// ServiceBindings starts each ServiceBinding's workflow and signals it when
// there is something to look at again: the ServiceBinding is new, changed
// or deleted; its service (an SFServiceBinding or a ServiceClaim) names
// another Secret; the Secret changed; a workload of its kind changed
// generation or came (a selector may match it) or went; a
// ClusterWorkloadResourceMapping changed. Workloads are watched by
// metadata only, one watch per kind a ServiceBinding names. Any other kind
// of Provisioned Service is watched too, once a ServiceBinding names it:
// one that comes, goes or names another Secret wakes its ServiceBindings.
type ServiceBindings struct {
	Client   ctrlclient.Client
	Temporal client.Client

	cache    cache.Cache
	bindings controller.Controller
	// workloads are the kinds of workloads, and services the kinds of
	// Provisioned Services of others, that the watcher watches.
	workloads, services kindWatches
	secrets             *bindingSecrets
}

// setupServiceBindings registers the ServiceBindings' controller.
func setupServiceBindings(mgr ctrl.Manager, secrets *bindingSecrets, tc client.Client, copts reconcilerOptions, keep *Loops) error {
	s := &ServiceBindings{Client: mgr.GetClient(), Temporal: tc, cache: mgr.GetCache(),
		workloads: kindWatches{of: "the ServiceBindings"}, services: kindWatches{of: "the ServiceBindings"}, secrets: secrets}
	keep.add(runKind{name: loops.ServiceBinding, workflowType: runs.ServiceBindingType,
		wants: func(ctx context.Context) ([]loops.Want, error) {
			return objectRuns(ctx, s.Client, &sbv1.ServiceBindingList{}, runs.ServiceBindingID, sbv1.Finalizer, nil)
		},
		wake: byRequest(s.wake)})
	indexes := map[string]func(*sbv1.ServiceBinding) string{
		sbServiceField: func(b *sbv1.ServiceBinding) string { return b.Spec.Service.Kind + "/" + b.Spec.Service.Name },
		sbSecretField: func(b *sbv1.ServiceBinding) string {
			if b.Status.Binding != nil {
				return b.Status.Binding.Name
			}
			return ""
		},
		sbWorkloadKindField: func(b *sbv1.ServiceBinding) string { return b.Spec.Workload.APIVersion + "/" + b.Spec.Workload.Kind },
	}
	if err := indexBy(mgr, &sbv1.ServiceBinding{}, indexes); err != nil {
		return err
	}
	o := copts()
	o.Reconciler = reconcile.Func(s.wake)
	c, err := controller.New("servicebinding", mgr, o)
	if err != nil {
		return fmt.Errorf("registering the ServiceBinding controller: %w", err)
	}
	s.bindings = c
	secretChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return secretOf(e.ObjectOld) != secretOf(e.ObjectNew) }}
	claimKey := func(o ctrlclient.Object) string { return "ServiceClaim/" + o.GetName() }
	for _, src := range []source.Source{
		source.Kind[ctrlclient.Object](s.cache, &osbv1alpha1.SFServiceBinding{}, s.by(sbServiceField, bindingOf), secretChanged),
		source.Kind[ctrlclient.Object](s.cache, &sbv1.ServiceBinding{}, &handler.EnqueueRequestForObject{}, specOrDeletion),
		source.Kind[ctrlclient.Object](s.cache, &primazav1alpha1.ServiceClaim{}, s.by(sbServiceField, claimKey), secretChanged),
		source.Kind[ctrlclient.Object](s.cache, &sbv1.ClusterWorkloadResourceMapping{}, s.by("", nil), predicate.GenerationChangedPredicate{}),
	} {
		if err := c.Watch(src); err != nil {
			return fmt.Errorf("watching for the ServiceBindings: %w", err)
		}
	}
	err = secrets.read(c, secretReader{
		// A Secret named as a service directly, or projected.
		sources: func(in cache.Cache) []source.Source {
			return []source.Source{
				source.Kind[ctrlclient.Object](in, ctrlclient.Object(secretsMetadata()), s.by(sbSecretField, nameOf)),
				source.Kind[ctrlclient.Object](in, ctrlclient.Object(secretsMetadata()), s.by(sbServiceField, func(o ctrlclient.Object) string { return "Secret/" + o.GetName() })),
			}
		},
		byBinding: func(key func(ctrlclient.Object) string) handler.EventHandler { return s.by(sbServiceField, key) },
	})
	if err != nil {
		return fmt.Errorf("watching for the ServiceBindings: %w", err)
	}
	return nil
}

// watchWorkloads starts the watch of a kind's workloads, once: a change of
// generation (someone's apply dropped the projection), a new one (a
// selector may match it) or one gone wakes the ServiceBindings of the kind.
func (s *ServiceBindings) watchWorkloads(gvk schema.GroupVersionKind) error {
	return s.workloads.ensure(s.bindings, gvk, func() source.Source {
		workloads := &metav1.PartialObjectMetadata{}
		workloads.SetGroupVersionKind(gvk)
		kind := gvk.GroupVersion().String() + "/" + gvk.Kind
		changed := predicate.Or[ctrlclient.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})
		return source.Kind[ctrlclient.Object](s.cache, ctrlclient.Object(workloads), s.by(sbWorkloadKindField, func(ctrlclient.Object) string { return kind }), changed)
	})
}

// watchServices starts the watch of a kind of Provisioned Service that is
// not one of the kinds watched from the start, once: one that comes, goes
// or names another Secret in status.binding.name wakes the ServiceBindings
// that name it.
func (s *ServiceBindings) watchServices(gvk schema.GroupVersionKind) error {
	return s.services.ensure(s.bindings, gvk, func() source.Source {
		services := &unstructured.Unstructured{}
		services.SetGroupVersionKind(gvk)
		namesAnother := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return provisionedSecret(e.ObjectOld) != provisionedSecret(e.ObjectNew)
		}}
		key := func(o ctrlclient.Object) string { return gvk.Kind + "/" + o.GetName() }
		return source.Kind[ctrlclient.Object](s.cache, ctrlclient.Object(services), s.by(sbServiceField, key), namesAnother)
	})
}

// provisionedSecret is the Secret a Provisioned Service of another kind
// names ("" for none).
func provisionedSecret(o ctrlclient.Object) string {
	if u, ok := o.(*unstructured.Unstructured); ok {
		name, _ := servicebinding.ServiceSecret(u)
		return name
	}
	return ""
}

// watchedFromTheStart are the services whose kinds setupServiceBindings
// watches.
var watchedFromTheStart = map[schema.GroupKind]bool{
	{Kind: "Secret"}: true,
	{Group: osbv1alpha1.GroupVersion.Group, Kind: "SFServiceBinding"}: true,
	{Group: primazav1alpha1.GroupVersion.Group, Kind: "ServiceClaim"}: true,
}

// by maps an object to the ServiceBindings in its namespace whose field is
// key(obj); an empty field maps it to every ServiceBinding.
func (s *ServiceBindings) by(field string, key func(ctrlclient.Object) string) handler.EventHandler {
	return mapBy(s.Client, func() ctrlclient.ObjectList { return &sbv1.ServiceBindingList{} }, field, key)
}

// wake signals the workflow of an existing ServiceBinding, starting it if
// it does not run, and watches its workloads' kind and its service's.
func (s *ServiceBindings) wake(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb sbv1.ServiceBinding
	if err := s.Client.Get(ctx, req.NamespacedName, &sb); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if gv, err := schema.ParseGroupVersion(sb.Spec.Workload.APIVersion); err == nil {
		if err := s.watchWorkloads(gv.WithKind(sb.Spec.Workload.Kind)); err != nil {
			// The kind may not be served yet; the workflow says so, and
			// looks again within a minute.
			log.FromContext(ctx).Info("not watching the workloads of a ServiceBinding", "error", err.Error())
		}
	}
	if gv, err := schema.ParseGroupVersion(sb.Spec.Service.APIVersion); err == nil && !watchedFromTheStart[gv.WithKind(sb.Spec.Service.Kind).GroupKind()] {
		if err := s.watchServices(gv.WithKind(sb.Spec.Service.Kind)); err != nil {
			// As for workloads: the workflow says why, and looks again.
			log.FromContext(ctx).Info("not watching the service of a ServiceBinding", "error", err.Error())
		}
	}
	if err := s.secrets.ensure(req.Namespace); err != nil {
		return ctrl.Result{}, err
	}
	id := runs.ServiceBindingID(req.Namespace, req.Name)
	workload := sb.Spec.Workload.Name
	if workload == "" {
		workload = "(selector)"
	}
	_, err := s.Temporal.SignalWithStartWorkflow(ctx, id, runs.SignalServiceBindingChanged, "", runs.LoopOptions(id, req.Namespace, fairness.Follow,
		fmt.Sprintf("service binding %s/%s: %s %s into %s %s", req.Namespace, req.Name,
			sb.Spec.Service.Kind, sb.Spec.Service.Name, sb.Spec.Workload.Kind, workload),
		fmt.Sprintf("kubectl get servicebinding.servicebinding.io %s -n %s -o yaml", req.Name, req.Namespace),
	), runs.ServiceBindingType, runs.ServiceBindingTarget{Namespace: req.Namespace, Name: req.Name})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("signalling the workflow of ServiceBinding %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}

// secretsMetadata is what the watcher watches of Secrets: their metadata,
// registries left out (NewWatcher).
func secretsMetadata() *metav1.PartialObjectMetadata {
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Secret"})
	return secrets
}
