package starter

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/workflows/runs"
)

// newClaimRecheck is how long after it asked the allocator for a new
// claim the watcher looks whether the claim has been settled.
const newClaimRecheck = 5 * time.Minute

// Claims wakes each ServiceClaim's workflow when there is something to
// look at again: the claim is changed or deleted; a service it holds
// changed or went; a service it could take became Available. A new claim
// is asked for instead: its namespace's allocator starts its workflow
// with what it gave it. The workflow decides what a wake means; the
// watcher only wakes it.
type Claims struct {
	Client   ctrlclient.Client
	Temporal client.Client

	asks    *asks
	secrets *bindingSecrets
}

// setupClaims registers the two reconcilers: one for the claims' own
// events, one for the services' events, mapped to the claims they concern.
func setupClaims(mgr ctrl.Manager, secrets *bindingSecrets, tc client.Client, copts reconcilerOptions, keep *Loops) error {
	c := &Claims{Client: mgr.GetClient(), Temporal: tc, asks: newAsks(tc), secrets: secrets}
	keep.add(runKind{name: loops.Claim, workflowType: runs.ClaimType, wants: c.claimRuns, wake: byRequest(c.wake)})
	keep.add(runKind{name: loops.ClaimAllocator, workflowType: runs.AllocatorType, wants: c.allocatorRuns, wake: c.startAllocator})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &primazav1alpha1.RegisteredService{}, claims.HolderField, claims.Holder); err != nil {
		return fmt.Errorf("indexing RegisteredServices by their claim: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &primazav1alpha1.RegisteredService{}, claims.SecretsField, claims.SecretsOf); err != nil {
		return fmt.Errorf("indexing RegisteredServices by the Secrets they read: %w", err)
	}
	// A claim's own finalizer and status writes wake nothing.
	if err := ctrl.NewControllerManagedBy(mgr).For(&primazav1alpha1.ServiceClaim{}, builder.WithPredicates(specOrDeletion)).
		Named("serviceclaim").WithOptions(copts()).Complete(reconcile.Func(c.ReconcileClaim)); err != nil {
		return fmt.Errorf("registering the ServiceClaim reconciler: %w", err)
	}
	enqueue := func(ctx context.Context, o ctrlclient.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, r := range c.claimsOf(ctx, o) {
			q.Add(r)
		}
	}
	services := handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if checkedOnly(e.ObjectOld, e.ObjectNew) {
				return
			}
			if !ownWrite(e.ObjectOld, e.ObjectNew) || c.holdsMore(ctx, e.ObjectNew) {
				enqueue(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
	}
	// A claim's ServiceBinding (its application's projection) that
	// projected, or failed to, wakes it to say so.
	projection := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*sbv1.ServiceBinding), e.ObjectNew.(*sbv1.ServiceBinding)
		return !equality.Semantic.DeepEqual(o.Status, n.Status)
	}})
	ctl, err := ctrl.NewControllerManagedBy(mgr).Named("serviceclaim-services").
		Watches(&primazav1alpha1.RegisteredService{}, services).
		Watches(&sbv1.ServiceBinding{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &primazav1alpha1.ServiceClaim{}, handler.OnlyControllerOwner()), projection).
		WithOptions(copts()).Build(reconcile.Func(c.wake))
	if err != nil {
		return fmt.Errorf("registering the reconciler of services for claims: %w", err)
	}
	// A Secret a held service reads changed (rotated credentials): the
	// claim's Secret, and what projects it, follow.
	err = secrets.read(ctl, secretReader{sources: func(in cache.Cache) []source.Source {
		return []source.Source{source.Kind[ctrlclient.Object](in, ctrlclient.Object(secretsMetadata()), handler.EnqueueRequestsFromMapFunc(c.holdersOf))}
	}})
	if err != nil {
		return fmt.Errorf("watching for the claims' services: %w", err)
	}
	return nil
}

// ReconcileClaim wakes the workflow of a claim that is changed or
// deleted: one whose status does not speak of its generation yet. A claim
// never settled (no state yet) asks its namespace's allocator itself
// instead, which starts the claim's workflow with its answer: the
// workflow's first step then resolves the claim with the service given,
// where it would otherwise ask and wait for the answer in a second one. It
// is looked at again after newClaimRecheck, and asks again if it is still
// not settled: the safety net for an ask that was lost.
func (c *Claims) ReconcileClaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var claim primazav1alpha1.ServiceClaim
	if err := c.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	// The services it may hold read Secrets of its namespace.
	if err := c.secrets.ensure(req.Namespace); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case !claim.DeletionTimestamp.IsZero():
	case claim.Status.State == "":
		return ctrl.Result{RequeueAfter: newClaimRecheck}, c.asks.ask(ctx, req.Namespace, req.Name)
	case claim.Status.ObservedGeneration == claim.Generation:
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, c.signal(ctx, req.NamespacedName)
}

// wake signals the workflow of an existing claim.
func (c *Claims) wake(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var claim primazav1alpha1.ServiceClaim
	if err := c.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	return ctrl.Result{}, c.signal(ctx, req.NamespacedName)
}

// ownWrite says whether a service's update is a claim's own hold of it: an
// Available service turned Claimed, its spec as it was. The claim that
// wrote it goes on from there; waking it would only repeat its step.
func ownWrite(oldObj, newObj ctrlclient.Object) bool {
	o, ok1 := oldObj.(*primazav1alpha1.RegisteredService)
	n, ok2 := newObj.(*primazav1alpha1.RegisteredService)
	return ok1 && ok2 && o.Generation == n.Generation && o.Status.ClaimRef == nil && n.Status.ClaimRef != nil &&
		n.Status.State == primazav1alpha1.ServiceClaimed && n.DeletionTimestamp.IsZero()
}

// checkedOnly is claims.CheckedOnly of two RegisteredServices.
func checkedOnly(oldObj, newObj ctrlclient.Object) bool {
	o, ok1 := oldObj.(*primazav1alpha1.RegisteredService)
	n, ok2 := newObj.(*primazav1alpha1.RegisteredService)
	return ok1 && ok2 && claims.CheckedOnly(o, n)
}

// holdsMore says whether the claim that holds svc holds another service
// too: a hold repeated after a lost step (a local activity run again after
// its workflow task timed out), which its claim must be woken to undo.
func (c *Claims) holdsMore(ctx context.Context, o ctrlclient.Object) bool {
	svc := o.(*primazav1alpha1.RegisteredService)
	var list primazav1alpha1.RegisteredServiceList
	err := c.Client.List(ctx, &list, ctrlclient.InNamespace(svc.Namespace), ctrlclient.MatchingFields{claims.HolderField: string(svc.Status.ClaimRef.UID)})
	return err != nil || len(list.Items) > 1
}

// claimsOf maps a service's event to the claims it concerns: the one that
// holds it, and, when it can be claimed, every unresolved claim it matches
// (they race for it; the service's resourceVersion decides).
func (c *Claims) claimsOf(ctx context.Context, o ctrlclient.Object) []reconcile.Request {
	svc, ok := o.(*primazav1alpha1.RegisteredService)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	if ref := svc.Status.ClaimRef; ref != nil {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: svc.Namespace, Name: ref.Name}})
	}
	if !claims.Claimable(svc) {
		return out
	}
	var list primazav1alpha1.ServiceClaimList
	if err := c.Client.List(ctx, &list, ctrlclient.InNamespace(svc.Namespace)); err != nil {
		log.FromContext(ctx).Error(err, "listing the claims a service could resolve", "service", svc.Name)
		return out
	}
	for i := range list.Items {
		claim := &list.Items[i]
		if claim.Status.State != primazav1alpha1.ClaimResolved && claims.Match(claim, svc) == claims.Matches {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}})
		}
	}
	return out
}

// holdersOf maps a Secret to the claims that hold a service reading it.
func (c *Claims) holdersOf(ctx context.Context, secret ctrlclient.Object) []reconcile.Request {
	var list primazav1alpha1.RegisteredServiceList
	if err := c.Client.List(ctx, &list, ctrlclient.InNamespace(secret.GetNamespace()), ctrlclient.MatchingFields{claims.SecretsField: secret.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the services that read a Secret", "secret", secret.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if ref := list.Items[i].Status.ClaimRef; ref != nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: secret.GetNamespace(), Name: ref.Name}})
		}
	}
	return out
}

// signal wakes the claim's workflow, starting it if it does not run.
func (c *Claims) signal(ctx context.Context, claim types.NamespacedName) error {
	_, err := c.Temporal.SignalWithStartWorkflow(ctx, runs.ClaimID(claim.Namespace, claim.Name), runs.SignalClaimChanged, "",
		runs.ClaimOptions(claim.Namespace, claim.Name), runs.ClaimType, runs.ClaimTarget{Namespace: claim.Namespace, Name: claim.Name})
	if err != nil {
		return fmt.Errorf("signalling the workflow of claim %s: %w", claim, err)
	}
	return nil
}

// claimRuns are the runs the claims call for: every claim settled once
// (a new one's run is started by its allocator's answer), and every claim
// being deleted that still holds its finalizer.
func (c *Claims) claimRuns(ctx context.Context) ([]loops.Want, error) {
	return objectRuns(ctx, c.Client, &primazav1alpha1.ServiceClaimList{}, runs.ClaimID, primazav1alpha1.ClaimFinalizer,
		func(o ctrlclient.Object) bool { return o.(*primazav1alpha1.ServiceClaim).Status.State != "" })
}

// allocatorRuns are the allocators the claims call for: one per namespace
// that has claims.
func (c *Claims) allocatorRuns(ctx context.Context) ([]loops.Want, error) {
	var list primazav1alpha1.ServiceClaimList
	if err := c.Client.List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the claims: %w", err)
	}
	seen := map[string]bool{}
	var out []loops.Want
	for i := range list.Items {
		if ns := list.Items[i].Namespace; !seen[ns] {
			seen[ns] = true
			out = append(out, loops.Want{ID: runs.AllocatorID(ns), Namespace: ns})
		}
	}
	return out, nil
}

// startAllocator starts the allocator of a namespace again, asked for
// the namespace's claims that were never settled: an ask the lost
// allocator had taken is not lost with it.
func (c *Claims) startAllocator(ctx context.Context, w loops.Want) error {
	var list primazav1alpha1.ServiceClaimList
	if err := c.Client.List(ctx, &list, ctrlclient.InNamespace(w.Namespace), ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the claims of %s: %w", w.Namespace, err)
	}
	var waiting []string
	for i := range list.Items {
		if claim := &list.Items[i]; claim.Status.State == "" && claim.DeletionTimestamp.IsZero() {
			waiting = append(waiting, claim.Name)
		}
	}
	if _, err := c.Temporal.ExecuteWorkflow(ctx, runs.AllocatorOptions(w.Namespace), runs.AllocatorType, w.Namespace, waiting); err != nil {
		return fmt.Errorf("starting the claim allocator of %s: %w", w.Namespace, err)
	}
	return nil
}
