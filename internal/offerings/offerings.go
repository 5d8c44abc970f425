// Package offerings serves the registered service offerings (SFServices)
// and their plans (SFPlans) from an informer cache, indexed by their OSB
// IDs, so that the OSB catalog endpoint and every operation's plan lookup
// cost no API server round trip.
package offerings

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"

	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/tenancy"
)

// idField indexes services and plans by spec.id.
const idField = "spec.id"

// ErrNotFound is returned for an ID that no SFService or SFPlan carries.
var ErrNotFound = errors.New("not registered")

// Cache answers questions about the registered services and plans.
type Cache struct {
	cache cache.Cache
	// live reads the API server when the cache has no object of an ID: a
	// plan created a moment ago may not have reached the cache, and an
	// operation must not fail as "unknown plan" for that.
	live      client.Reader
	namespace string
	boundary  tenancy.Boundary
}

// New returns a cache of the offerings of the cluster cfg reaches, of one
// namespace or, when namespace is empty, of all; boundary says which
// namespaces are the catalog. It serves once Start has synced its cache.
func New(cfg *rest.Config, scheme *runtime.Scheme, namespace string, boundary tenancy.Boundary) (*Cache, error) {
	opts := cache.Options{
		Scheme:      scheme,
		NewInformer: informers.New,
		ByObject: map[client.Object]cache.ByObject{
			&osbv1alpha1.SFService{}: {},
			&osbv1alpha1.SFPlan{}:    {},
		},
	}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the offerings cache: %w", err)
	}
	ctx := context.Background()
	if err := c.IndexField(ctx, &osbv1alpha1.SFService{}, idField, func(o client.Object) []string {
		return []string{o.(*osbv1alpha1.SFService).Spec.ID}
	}); err != nil {
		return nil, err
	}
	if err := c.IndexField(ctx, &osbv1alpha1.SFPlan{}, idField, func(o client.Object) []string {
		return []string{o.(*osbv1alpha1.SFPlan).Spec.ID}
	}); err != nil {
		return nil, err
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the offerings' client: %w", err)
	}
	return &Cache{cache: c, live: live, namespace: namespace, boundary: boundary}, nil
}

// Start runs the cache until ctx is done; it returns once the cache has
// synced or failed to.
func (c *Cache) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- c.cache.Start(ctx) }()
	if !c.cache.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return fmt.Errorf("starting the offerings cache: %w", err)
		default:
			return errors.New("the offerings cache did not sync")
		}
	}
	return nil
}

// Plan returns the catalog's SFPlan whose spec.id is id: the one the OSB
// catalog serves.
func (c *Cache) Plan(ctx context.Context, id string) (*osbv1alpha1.SFPlan, error) {
	return c.plan(ctx, id, func(list []osbv1alpha1.SFPlan) []osbv1alpha1.SFPlan {
		return slices.DeleteFunc(list, func(p osbv1alpha1.SFPlan) bool { return !c.boundary.Trusted(p.Namespace) })
	})
}

// PlanFor returns the SFPlan whose spec.id is id that an instance of
// namespace uses: the catalog's, or else one of its own namespace
// (tenancy.Served). Another tenant's plan is not found.
func (c *Cache) PlanFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFPlan, error) {
	return c.plan(ctx, id, func(list []osbv1alpha1.SFPlan) []osbv1alpha1.SFPlan {
		return tenancy.Served(c.boundary, namespace, list, func(p osbv1alpha1.SFPlan) string { return p.Namespace })
	})
}

func (c *Cache) plan(ctx context.Context, id string, served func([]osbv1alpha1.SFPlan) []osbv1alpha1.SFPlan) (*osbv1alpha1.SFPlan, error) {
	var list osbv1alpha1.SFPlanList
	if err := c.byID(ctx, &list, id); err != nil {
		return nil, fmt.Errorf("looking up plan %q: %w", id, err)
	}
	list.Items = served(slices.DeleteFunc(list.Items, func(p osbv1alpha1.SFPlan) bool { return p.Spec.ID != id }))
	switch len(list.Items) {
	case 0:
		return nil, fmt.Errorf("plan %q: %w", id, ErrNotFound)
	case 1:
		return &list.Items[0], nil
	default:
		return nil, fmt.Errorf("plan %q is claimed by %d SFPlans (%s/%s and %s/%s): plan IDs must be unique",
			id, len(list.Items), list.Items[0].Namespace, list.Items[0].Name, list.Items[1].Namespace, list.Items[1].Name)
	}
}

// Service returns the catalog's SFService whose spec.id is id.
func (c *Cache) Service(ctx context.Context, id string) (*osbv1alpha1.SFService, error) {
	return c.service(ctx, id, func(list []osbv1alpha1.SFService) []osbv1alpha1.SFService {
		return slices.DeleteFunc(list, func(s osbv1alpha1.SFService) bool { return !c.boundary.Trusted(s.Namespace) })
	})
}

// ServiceFor returns the SFService whose spec.id is id that an instance
// of namespace uses, as PlanFor chooses plans.
func (c *Cache) ServiceFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFService, error) {
	return c.service(ctx, id, func(list []osbv1alpha1.SFService) []osbv1alpha1.SFService {
		return tenancy.Served(c.boundary, namespace, list, func(s osbv1alpha1.SFService) string { return s.Namespace })
	})
}

func (c *Cache) service(ctx context.Context, id string, served func([]osbv1alpha1.SFService) []osbv1alpha1.SFService) (*osbv1alpha1.SFService, error) {
	var list osbv1alpha1.SFServiceList
	if err := c.byID(ctx, &list, id); err != nil {
		return nil, fmt.Errorf("looking up service %q: %w", id, err)
	}
	list.Items = served(slices.DeleteFunc(list.Items, func(s osbv1alpha1.SFService) bool { return s.Spec.ID != id }))
	switch len(list.Items) {
	case 0:
		return nil, fmt.Errorf("service %q: %w", id, ErrNotFound)
	case 1:
		return &list.Items[0], nil
	default:
		return nil, fmt.Errorf("service %q is claimed by %d SFServices: service IDs must be unique", id, len(list.Items))
	}
}

// byID lists into list the cached objects whose spec.id is id; when the
// cache has none, every one of the API server (of the namespace, if the
// cache has one), which the caller filters by spec.id.
func (c *Cache) byID(ctx context.Context, list client.ObjectList, id string) error {
	if err := c.cache.List(ctx, list, client.MatchingFields{idField: id}); err != nil || meta.LenList(list) > 0 {
		return err
	}
	return c.live.List(ctx, list, client.InNamespace(c.namespace))
}

// Services returns the catalog's services: those of the catalog
// namespaces.
func (c *Cache) Services(ctx context.Context) ([]osbv1alpha1.SFService, error) {
	var list osbv1alpha1.SFServiceList
	if err := c.cache.List(ctx, &list); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(s osbv1alpha1.SFService) bool { return !c.boundary.Trusted(s.Namespace) }), nil
}

// Plans returns the catalog's plans.
func (c *Cache) Plans(ctx context.Context) ([]osbv1alpha1.SFPlan, error) {
	var list osbv1alpha1.SFPlanList
	if err := c.cache.List(ctx, &list); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p osbv1alpha1.SFPlan) bool { return !c.boundary.Trusted(p.Namespace) }), nil
}
