package starter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// catalogDelay is how long after a change its namespace's catalogs are
// brought up to date.
const catalogDelay = 500 * time.Millisecond

// catalogInterval is the least time between two writes of a namespace's
// catalogs. A catalog lists every service its environment can claim, a
// thousand in a large namespace, and the API server decodes, coerces and
// re-encodes all of it at each write: a burst of a thousand claims, each
// taking a service off the list, had it written every catalogDelay, which
// cost the API server as much as all the claims' own status writes.
const catalogInterval = 5 * time.Second

// catalogLabel marks the ServiceCatalogs Quartermaster keeps: it deletes
// those whose environment no service or claim names any longer, and no
// other.
const catalogLabel = "primaza.io/catalog-of"

// Catalogs keeps one ServiceCatalog per environment in each namespace with
// RegisteredServices or ServiceClaims, named after the environment: what
// that environment can claim now (claims.Catalog). Every change of a
// service, a claim or a kept catalog recomputes its namespace's catalogs;
// bursts of changes fold into one pass per namespace, and a catalog is
// written only when what it lists changed, and a namespace's catalogs at
// most once every catalogInterval.
type Catalogs struct {
	Client ctrlclient.Client

	mu sync.Mutex
	// written is when each namespace's catalogs were last written.
	written map[string]time.Time
}

// setupCatalogs registers the reconciler of the catalogs.
func setupCatalogs(mgr ctrl.Manager, copts reconcilerOptions) error {
	c := &Catalogs{Client: mgr.GetClient(), written: map[string]time.Time{}}
	// A change is seen after catalogDelay, so that a burst of changes in a
	// namespace (a hundred claims resolving) writes its catalogs once.
	later := func(o ctrlclient.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}, catalogDelay)
	}
	byNamespace := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// A service's health check's bookkeeping (its result, time
			// and counters, with its state as it was) lists nothing new:
			// at 20,000 services checked every minute, recomputing the
			// catalogs for it was over a fifth of qm's CPU.
			if checkedOnly(e.ObjectOld, e.ObjectNew) {
				return
			}
			later(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(e.Object, q)
		},
	}
	err := ctrl.NewControllerManagedBy(mgr).Named("servicecatalog").
		Watches(&primazav1alpha1.RegisteredService{}, byNamespace).
		Watches(&primazav1alpha1.ServiceClaim{}, byNamespace).
		Watches(&primazav1alpha1.ServiceCatalog{}, byNamespace).
		WithOptions(copts()).Complete(reconcile.Func(c.Reconcile))
	if err != nil {
		return fmt.Errorf("registering the ServiceCatalog reconciler: %w", err)
	}
	return nil
}

// Reconcile brings the catalogs of one namespace (the request's) up to
// date.
func (c *Catalogs) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c.mu.Lock()
	wait := time.Until(c.written[req.Namespace].Add(catalogInterval))
	c.mu.Unlock()
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	ns := ctrlclient.InNamespace(req.Namespace)
	var services primazav1alpha1.RegisteredServiceList
	var claimList primazav1alpha1.ServiceClaimList
	var catalogs primazav1alpha1.ServiceCatalogList
	if err := c.Client.List(ctx, &services, ns); err != nil {
		return ctrl.Result{}, err
	}
	if err := c.Client.List(ctx, &claimList, ns); err != nil {
		return ctrl.Result{}, err
	}
	if err := c.Client.List(ctx, &catalogs, ns, ctrlclient.HasLabels{catalogLabel}); err != nil {
		return ctrl.Result{}, err
	}
	kept := map[string]bool{}
	for _, env := range claims.Environments(services.Items, claimList.Items) {
		if errs := validation.IsDNS1123Subdomain(env); len(errs) > 0 {
			log.FromContext(ctx).Info("no ServiceCatalog for an environment that is not a valid name", "environment", env, "why", errs)
			continue
		}
		kept[env] = true
		wrote, err := c.write(ctx, req.Namespace, env, primazav1alpha1.ServiceCatalogSpec{
			Services:        claims.Catalog(env, services.Items),
			ClaimedByLabels: claims.ClaimedByLabels(env, services.Items, claimList.Items),
		})
		if wrote {
			c.mu.Lock()
			c.written[req.Namespace] = time.Now()
			c.mu.Unlock()
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	for i := range catalogs.Items {
		if cat := &catalogs.Items[i]; !kept[cat.Name] {
			if err := c.Client.Delete(ctx, cat); ctrlclient.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("deleting the catalog of %s, which nothing names: %w", cat.Name, err)
			}
		}
	}
	return ctrl.Result{}, nil
}

// write creates or updates the catalog of env to be spec, and its status
// to count its services, each only if it changed, and says whether it sent
// a write (a write refused costs the API server the decoding all the same).
func (c *Catalogs) write(ctx context.Context, namespace, env string, spec primazav1alpha1.ServiceCatalogSpec) (bool, error) {
	services := spec.Services
	var cat primazav1alpha1.ServiceCatalog
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: env}, &cat)
	switch {
	case apierrors.IsNotFound(err):
		cat = primazav1alpha1.ServiceCatalog{
			ObjectMeta: metav1.ObjectMeta{Name: env, Namespace: namespace, Labels: map[string]string{catalogLabel: kubenames.LabelValue(env)}},
			Spec:       spec,
		}
		if err := c.Client.Create(ctx, &cat); err != nil {
			return true, fmt.Errorf("creating the catalog of %s: %w", env, err)
		}
	case err != nil:
		return false, err
	case cat.Labels[catalogLabel] != kubenames.LabelValue(env):
		// Someone else's catalog of that name: leave it alone.
		return false, nil
	case !equality.Semantic.DeepEqual(cat.Spec, spec):
		cat.Spec = spec
		if err := c.Client.Update(ctx, &cat); err != nil {
			return true, fmt.Errorf("updating the catalog of %s: %w", env, err)
		}
	}
	status := *cat.Status.DeepCopy()
	status.ServiceCount = int32(len(services))
	status.ObservedGeneration = cat.Generation
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Listed", ObservedGeneration: cat.Generation,
		Message: fmt.Sprintf("%d services can be claimed from %s", len(services), env),
	})
	if equality.Semantic.DeepEqual(cat.Status, status) {
		return false, nil
	}
	// A patch of the status alone: an update would send the whole list
	// again, for the API server to decode once more.
	base := cat.DeepCopy()
	cat.Status = status
	if err := c.Client.Status().Patch(ctx, &cat, ctrlclient.MergeFrom(base)); err != nil {
		return true, fmt.Errorf("writing the status of the catalog of %s: %w", env, err)
	}
	return true, nil
}
