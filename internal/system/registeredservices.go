package system

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/crds"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/internal/healthcheck"
	"github.com/quartermaster/qm/internal/informers"
)

// registeredServiceActivities builds the worker's activities of the
// registered services, their health checks and the claims: they share a
// cache of the services and of their checks' Jobs and pods (those alone, by
// label), so that a pass over thousands of services reads nothing from the
// API server; the checks get a recorder for the Events of their changes of
// state.
func registeredServiceActivities(ctx context.Context, g *errgroup.Group, cfg *rest.Config, kube ctrlclient.Client, minute time.Duration, namespaces []string) (*activities.HealthChecks, *activities.Claims, error) {
	checks, err := labels.NewRequirement(healthcheck.LabelService, selection.Exists, nil)
	if err != nil {
		return nil, nil, err
	}
	onlyChecks := cache.ByObject{Label: labels.NewSelector().Add(*checks)}
	c, err := cache.New(cfg, cache.Options{
		Scheme:      crds.NewScheme(),
		NewInformer: informers.New,
		ByObject:    map[ctrlclient.Object]cache.ByObject{&batchv1.Job{}: onlyChecks, &corev1.Pod{}: onlyChecks},
		// Only the services of the watched namespaces are checked here.
		DefaultNamespaces: informers.Namespaces(namespaces),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the health checks' cache: %w", err)
	}
	shardOf := func(o ctrlclient.Object) []string {
		return []string{strconv.Itoa(healthcheck.Shard(o.GetNamespace(), o.GetName()))}
	}
	if err := c.IndexField(ctx, &primazav1alpha1.RegisteredService{}, activities.ShardField, shardOf); err != nil {
		return nil, nil, fmt.Errorf("indexing RegisteredServices by shard: %w", err)
	}
	if err := c.IndexField(ctx, &primazav1alpha1.RegisteredService{}, claims.HolderField, claims.Holder); err != nil {
		return nil, nil, fmt.Errorf("indexing RegisteredServices by their claim: %w", err)
	}
	for _, obj := range []ctrlclient.Object{&primazav1alpha1.RegisteredService{}, &batchv1.Job{}, &corev1.Pod{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, nil, fmt.Errorf("watching %T for the health checks: %w", obj, err)
		}
	}
	g.Go(func() error { return c.Start(ctx) })
	if !c.WaitForCacheSync(ctx) {
		return nil, nil, errors.New("the health checks' cache did not sync")
	}
	// Events at the kubelet's rate (50/s, bursts of 100), not client-go's
	// default of 5/s: a thousand services checked for the first time, or
	// turned Unreachable together, would otherwise have their Events
	// written over minutes, each long after its change.
	events := rest.CopyConfig(cfg)
	events.QPS, events.Burst = 50, 100
	clientset, err := kubernetes.NewForConfig(events)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the Events client: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clientset.CoreV1().Events("")})
	g.Go(func() error { <-ctx.Done(); broadcaster.Shutdown(); return nil })
	health := &activities.HealthChecks{
		Client: kube,
		Cache:  c,
		Events: broadcaster.NewRecorder(crds.NewScheme(), corev1.EventSource{Component: "qm-worker"}),
		Minute: minute,
	}
	return health, &activities.Claims{Client: kube, Cache: c}, nil
}
