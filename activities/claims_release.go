package activities

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/workflows/runs"
)

// Release lets go of every service the claim (by its UID) holds, deletes
// its binding Secret and its finalizer: the claim is deleted.
func (c *Claims) Release(ctx context.Context, t runs.ClaimTarget, claimUID types.UID) error {
	return c.letGo(ctx, t, claimUID, "")
}

// letGo is Release; given names a service the allocator may just have
// given the claim, which the cache may not show held yet.
func (c *Claims) letGo(ctx context.Context, t runs.ClaimTarget, claimUID types.UID, given string) error {
	if claimUID == "" && given != "" {
		// A claim gone before its workflow ever read it (the allocator's
		// answer started it): the service given, if held under the claim's
		// name, is held for a claim that no longer exists.
		if err := c.takeBack(ctx, t, given); err != nil {
			return err
		}
	}
	if claimUID != "" {
		held, err := c.held(ctx, t.Namespace, claimUID, given)
		if err != nil {
			return err
		}
		for i := range held {
			if err := c.release(ctx, &held[i], claimUID); err != nil {
				return err
			}
		}
	}
	claim, err := c.claim(ctx, t)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.deleteBinding(ctx, claim); err != nil {
		return err
	}
	if _, _, err := c.project(ctx, claim, false); err != nil {
		return err
	}
	base := claim.DeepCopy()
	if controllerutil.RemoveFinalizer(claim, primazav1alpha1.ClaimFinalizer) {
		if err := c.Client.Patch(ctx, claim, ctrlclient.MergeFrom(base)); ctrlclient.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing the claim's finalizer: %w", err)
		}
	}
	return nil
}

// takeBack lets go of service if a claim of t's name holds it.
func (c *Claims) takeBack(ctx context.Context, t runs.ClaimTarget, service string) error {
	var svc primazav1alpha1.RegisteredService
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: service}, &svc); err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	if ref := svc.Status.ClaimRef; ref != nil && ref.Name == t.Name {
		return c.release(ctx, &svc, ref.UID)
	}
	return nil
}

// release clears the claim of uid from svc: a Claimed service is
// Available again; an unhealthy one keeps its state.
func (c *Claims) release(ctx context.Context, svc *primazav1alpha1.RegisteredService, uid types.UID) error {
	for {
		if svc.Status.ClaimRef == nil || svc.Status.ClaimRef.UID != uid {
			return nil
		}
		base := svc.DeepCopy()
		svc.Status.ClaimRef = nil
		if svc.Status.State == primazav1alpha1.ServiceClaimed {
			svc.Status.State = primazav1alpha1.ServiceAvailable
		}
		err := c.Client.Status().Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("releasing service %s: %w", svc.Name, err)
		}
		key := ctrlclient.ObjectKeyFromObject(svc)
		svc = &primazav1alpha1.RegisteredService{}
		if err := c.Client.Get(ctx, key, svc); err != nil {
			return ctrlclient.IgnoreNotFound(err)
		}
	}
}

// held lists the services that the claim uid holds, as the cache's index
// shows them, and hint, a service the allocator may just have given it:
// read afresh when the cache does not show it held yet. Only the claim
// lets go of its holds, and any other change to a service it holds wakes
// it again, so a cached copy that shows the hold is as good as a fresh
// one here (a write to it is under its resourceVersion all the same).
func (c *Claims) held(ctx context.Context, namespace string, uid types.UID, hint string) ([]primazav1alpha1.RegisteredService, error) {
	var list primazav1alpha1.RegisteredServiceList
	if err := c.reader().List(ctx, &list, ctrlclient.InNamespace(namespace), ctrlclient.MatchingFields{claims.HolderField: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing the services the claim holds: %w", err)
	}
	out := slices.DeleteFunc(list.Items, func(s primazav1alpha1.RegisteredService) bool { return !heldBy(&s, uid) })
	if hint == "" || slices.ContainsFunc(out, func(s primazav1alpha1.RegisteredService) bool { return s.Name == hint }) {
		return out, nil
	}
	var svc primazav1alpha1.RegisteredService
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: hint}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return out, nil
		}
		return nil, fmt.Errorf("reading service %s: %w", hint, err)
	}
	if heldBy(&svc, uid) {
		out = append(out, svc)
	}
	return out, nil
}

// heldBy says whether svc is held by the claim uid.
func heldBy(svc *primazav1alpha1.RegisteredService, uid types.UID) bool {
	return svc.Status.ClaimRef != nil && svc.Status.ClaimRef.UID == uid
}
