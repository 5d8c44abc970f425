package activities

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
)

// Release lets go of every service the claim (by its UID) holds, deletes
// its binding Secret and its finalizer: the claim is deleted.
func (c *Claims) Release(ctx context.Context, t ClaimTarget, claimUID types.UID) error {
	if claimUID != "" {
		held, err := c.held(ctx, t.Namespace, claimUID, "")
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

// held lists the services that the claim uid holds: from the cache's
// index, then each read afresh. A hold the cache has not seen yet is found
// by the next resolution, which the hold's own event brings.
func (c *Claims) held(ctx context.Context, namespace string, uid types.UID, hint string) ([]primazav1alpha1.RegisteredService, error) {
	var list primazav1alpha1.RegisteredServiceList
	if err := c.reader().List(ctx, &list, ctrlclient.InNamespace(namespace), ctrlclient.MatchingFields{claims.HolderField: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing the services the claim holds: %w", err)
	}
	if hint != "" && !slices.ContainsFunc(list.Items, func(s primazav1alpha1.RegisteredService) bool { return s.Name == hint }) {
		list.Items = append(list.Items, primazav1alpha1.RegisteredService{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: hint}})
	}
	var out []primazav1alpha1.RegisteredService
	for _, cached := range list.Items {
		var svc primazav1alpha1.RegisteredService
		if err := c.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&cached), &svc); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading service %s: %w", cached.Name, err)
		}
		if svc.Status.ClaimRef != nil && svc.Status.ClaimRef.UID == uid {
			out = append(out, svc)
		}
	}
	return out, nil
}
