package starter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/serviceclass"
)

// serviceClassLabel marks the RegisteredServices, and their Secrets, that a
// ServiceClass keeps: the class's name. Those it no longer calls for are
// deleted, and no other.
const serviceClassLabel = "primaza.io/service-class"

// serviceClassKindField indexes ServiceClasses by the kind they register
// ("apiVersion/Kind"), so that an event of a resource finds its classes.
const serviceClassKindField = "spec.resource.kind"

// ServiceClasses keeps, for each ServiceClass, one RegisteredService per
// resource of its kind in its namespace (serviceclass.Register): created
// with the resource, changed with it, deleted with it. It watches each
// kind a class names once the watcher may list and watch it, as the
// UsageKinds' workloads are watched: kinds chosen at run time.
type ServiceClasses struct {
	Client ctrlclient.Client
	// Live reads the Secrets a class's mappings link to: the watcher's
	// cache holds Secrets' metadata only.
	Live ctrlclient.Reader

	cache cache.Cache
	// resources is where the classes' kinds are watched and listed
	// (classResources).
	resources cache.Cache
	classes   controller.Controller
	kinds     kindWatches
}

// setupServiceClasses registers the ServiceClasses' controller.
func setupServiceClasses(mgr ctrl.Manager, resources cache.Cache, copts reconcilerOptions) error {
	s := &ServiceClasses{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), cache: mgr.GetCache(), resources: resources,
		kinds: kindWatches{of: "the ServiceClasses"}}
	if err := indexBy(mgr, &primazav1alpha1.ServiceClass{}, map[string]func(*primazav1alpha1.ServiceClass) string{
		serviceClassKindField: func(c *primazav1alpha1.ServiceClass) string {
			return c.Spec.Resource.APIVersion + "/" + c.Spec.Resource.Kind
		},
	}); err != nil {
		return err
	}
	o := copts()
	o.Reconciler = reconcile.Func(s.Reconcile)
	c, err := controller.New("serviceclass", mgr, o)
	if err != nil {
		return fmt.Errorf("registering the ServiceClass controller: %w", err)
	}
	s.classes = c
	byClass := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o ctrlclient.Object) []reconcile.Request {
		if name := kubenames.NameOf(o, serviceClassLabel); name != "" {
			return []reconcile.Request{{NamespacedName: ctrlclient.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	})
	for _, src := range []source.Source{
		source.Kind[ctrlclient.Object](s.cache, &primazav1alpha1.ServiceClass{}, &handler.EnqueueRequestForObject{}),
		// A RegisteredService of a class edited or deleted by someone else
		// is put back.
		source.Kind[ctrlclient.Object](s.cache, &primazav1alpha1.RegisteredService{}, byClass),
	} {
		if err := c.Watch(src); err != nil {
			return fmt.Errorf("watching for the ServiceClasses: %w", err)
		}
	}
	return nil
}

// Reconcile brings the RegisteredServices of one ServiceClass up to date
// with the resources of its kind, and says in its status how many it keeps
// and, when one cannot be registered, why.
func (s *ServiceClasses) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var class primazav1alpha1.ServiceClass
	if err := s.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if !class.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its RegisteredServices are owned by it, and go with it
	}
	base := class.DeepCopy()
	ready := metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Registered", ObservedGeneration: class.Generation}
	kept, problem, err := s.register(ctx, &class)
	if err != nil {
		return ctrl.Result{}, err
	}
	result := ctrl.Result{}
	if problem != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
		if problem.retry {
			result.RequeueAfter = unresolvedRetry
		}
	} else {
		ready.Message = fmt.Sprintf("%d %s registered", kept, class.Spec.Resource.Kind)
	}
	class.Status.ObservedGeneration, class.Status.Services = class.Generation, int32(kept)
	meta.SetStatusCondition(&class.Status.Conditions, ready)
	if !equality.Semantic.DeepEqual(base.Status, class.Status) {
		if err := s.Client.Status().Patch(ctx, &class, ctrlclient.MergeFrom(base)); err != nil {
			return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
		}
	}
	return result, nil
}

// classProblem is why a class does not register (all of) its resources.
type classProblem struct {
	reason, message string
	// retry: a kind not served yet, or not permitted, is looked at again.
	retry bool
}

// register keeps the RegisteredServices of class and returns how many it
// keeps, and the first problem.
func (s *ServiceClasses) register(ctx context.Context, class *primazav1alpha1.ServiceClass) (int, *classProblem, error) {
	gv, err := schema.ParseGroupVersion(class.Spec.Resource.APIVersion)
	if err != nil {
		return 0, &classProblem{reason: "InvalidResource", message: err.Error()}, nil
	}
	selects, err := serviceclass.Selector(class)
	if err != nil {
		return 0, &classProblem{reason: "InvalidResource", message: err.Error()}, nil
	}
	mapping, err := bindingusage.Resolve(s.Client.RESTMapper(), sc.ResourceReference{Group: gv.Group, Version: gv.Version, Kind: class.Spec.Resource.Kind})
	if err != nil {
		return 0, &classProblem{reason: "NotServed", message: err.Error(), retry: true}, nil
	}
	// Cluster-wide: the watcher's cache watches a kind in every namespace.
	missing, err := bindingusage.AccessOf(ctx, s.Client, mapping.Resource, "", "", bindingusage.WatchVerbs)
	if err != nil {
		return 0, nil, err
	}
	if len(missing) > 0 {
		return 0, &classProblem{reason: "Forbidden", message: "Quartermaster lacks the RBAC rules " + strings.Join(missing, "; "), retry: true}, nil
	}
	if err := s.watch(mapping.GroupVersionKind); err != nil {
		return 0, nil, err
	}
	resources := &unstructured.UnstructuredList{}
	resources.SetGroupVersionKind(mapping.GroupVersionKind.GroupVersion().WithKind(mapping.GroupVersionKind.Kind + "List"))
	if err := s.resources.List(ctx, resources, ctrlclient.InNamespace(class.Namespace)); err != nil {
		return 0, nil, fmt.Errorf("listing the %s of ServiceClass %s/%s: %w", mapping.Resource.Resource, class.Namespace, class.Name, err)
	}
	wanted := map[string]bool{}
	var problem *classProblem
	secretHas := s.secretHas(ctx, class.Namespace)
	for i := range resources.Items {
		res := &resources.Items[i]
		if !res.GetDeletionTimestamp().IsZero() || !selects(res) {
			continue
		}
		reg, err := serviceclass.Register(class, res, secretHas)
		if err != nil {
			if problem == nil {
				// A linked Secret made later wakes no class: look again.
				problem = &classProblem{reason: "MappingFailed", message: err.Error(), retry: true}
			}
			continue
		}
		switch err := s.keep(ctx, class, reg); {
		case errors.Is(err, errOwnedElsewhere):
			if problem == nil {
				problem = &classProblem{reason: "NameTaken", message: fmt.Sprintf("%s %s: %v", res.GetKind(), res.GetName(), err)}
			}
			continue
		case err != nil:
			return 0, nil, err
		}
		wanted[reg.Name] = true
	}
	return len(wanted), problem, s.prune(ctx, class, wanted)
}

// watch starts the watch of a class's kind once: a resource of it that
// comes, changes or goes wakes the classes of that kind in its namespace.
func (s *ServiceClasses) watch(gvk schema.GroupVersionKind) error {
	return s.kinds.ensure(s.classes, gvk, func() source.Source {
		resources := &unstructured.Unstructured{}
		resources.SetGroupVersionKind(gvk)
		key := gvk.GroupVersion().String() + "/" + gvk.Kind
		classes := mapBy(s.Client, func() ctrlclient.ObjectList { return &primazav1alpha1.ServiceClassList{} }, serviceClassKindField,
			func(ctrlclient.Object) string { return key })
		return source.Kind[ctrlclient.Object](s.resources, ctrlclient.Object(resources), classes)
	})
}

// secretHas is serviceclass.SecretKeys over the Secrets of namespace. Each
// Secret is read once per reconcile: a class's fields often link to one
// Secret per resource.
func (s *ServiceClasses) secretHas(ctx context.Context, namespace string) serviceclass.SecretKeys {
	type read struct {
		secret corev1.Secret
		err    error
	}
	reads := map[string]*read{}
	return func(name, key string) error {
		r, ok := reads[name]
		if !ok {
			r = &read{}
			r.err = s.Live.Get(ctx, ctrlclient.ObjectKey{Namespace: namespace, Name: name}, &r.secret)
			reads[name] = r
		}
		secret, err := r.secret, r.err
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("the linked Secret %s does not exist", name)
		case err != nil:
			return fmt.Errorf("reading the linked Secret %s: %w", name, err)
		}
		if _, ok := secret.Data[key]; !ok {
			return fmt.Errorf("the linked Secret %s has no key %s", name, key)
		}
		return nil
	}
}

// keep creates or updates the RegisteredService of a registration, and the
// Secret of its secret values (deleted when it has none), both owned by
// the class. A RegisteredService or Secret of that name that the class does
// not own is left alone: errOwnedElsewhere.
func (s *ServiceClasses) keep(ctx context.Context, class *primazav1alpha1.ServiceClass, reg serviceclass.Registration) error {
	if err := s.keepSecret(ctx, class, reg.Name, reg.Secret); err != nil {
		return err
	}
	rs := &primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Namespace: class.Namespace, Name: reg.Name}}
	_, err := controllerutil.CreateOrUpdate(ctx, s.Client, rs, func() error {
		if !rs.CreationTimestamp.IsZero() && !metav1.IsControlledBy(rs, class) {
			return fmt.Errorf("RegisteredService %s: %w", rs.Name, errOwnedElsewhere)
		}
		rs.Spec = reg.Spec
		return s.own(class, rs)
	})
	if err != nil && !errors.Is(err, errOwnedElsewhere) {
		return fmt.Errorf("writing RegisteredService %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	return err
}

// keepSecret writes the Secret of a registration's secret values, or
// deletes it when there are none. Secrets are read live: the watcher's
// cache holds their metadata only, and must not start holding their data.
func (s *ServiceClasses) keepSecret(ctx context.Context, class *primazav1alpha1.ServiceClass, name string, data map[string][]byte) error {
	var secret corev1.Secret
	err := s.Live.Get(ctx, ctrlclient.ObjectKey{Namespace: class.Namespace, Name: name}, &secret)
	switch {
	case apierrors.IsNotFound(err) && len(data) == 0:
		return nil
	case apierrors.IsNotFound(err):
		secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: class.Namespace, Name: name}, Data: data}
		if err := s.own(class, &secret); err != nil {
			return err
		}
		if err := s.Client.Create(ctx, &secret); err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", secret.Namespace, name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", class.Namespace, name, err)
	case !metav1.IsControlledBy(&secret, class):
		return fmt.Errorf("Secret %s: %w", name, errOwnedElsewhere)
	case len(data) == 0:
		if err := s.Client.Delete(ctx, &secret); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s: %w", secret.Namespace, name, err)
		}
		return nil
	case equality.Semantic.DeepEqual(secret.Data, data):
		return nil
	default:
		secret.Data = data
		if err := s.Client.Update(ctx, &secret); err != nil {
			return fmt.Errorf("updating Secret %s/%s: %w", secret.Namespace, name, err)
		}
		return nil
	}
}

// own labels obj as class's and makes class its controller, so that the
// class's deletion takes it away.
func (s *ServiceClasses) own(class *primazav1alpha1.ServiceClass, obj ctrlclient.Object) error {
	kubenames.SetLabel(obj, serviceClassLabel, class.Name)
	return controllerutil.SetControllerReference(class, obj, s.Client.Scheme())
}

// errOwnedElsewhere is a RegisteredService or Secret of the name a class
// would give that another owner holds.
var errOwnedElsewhere = errors.New("it exists and is not the class's: left alone")

// prune deletes the RegisteredServices, and their Secrets, that class keeps
// and that no resource calls for any longer.
func (s *ServiceClasses) prune(ctx context.Context, class *primazav1alpha1.ServiceClass, wanted map[string]bool) error {
	var services primazav1alpha1.RegisteredServiceList
	if err := s.Client.List(ctx, &services, ctrlclient.InNamespace(class.Namespace), ctrlclient.MatchingLabels{serviceClassLabel: kubenames.LabelValue(class.Name)}); err != nil {
		return fmt.Errorf("listing the RegisteredServices of ServiceClass %s/%s: %w", class.Namespace, class.Name, err)
	}
	for i := range services.Items {
		rs := &services.Items[i]
		if wanted[rs.Name] || !metav1.IsControlledBy(rs, class) {
			continue
		}
		if err := s.keepSecret(ctx, class, rs.Name, nil); err != nil && !errors.Is(err, errOwnedElsewhere) {
			return err
		}
		if err := s.Client.Delete(ctx, rs); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting RegisteredService %s/%s, which no resource of ServiceClass %s calls for: %w", rs.Namespace, rs.Name, class.Name, err)
		}
	}
	return nil
}
