package activities

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/workflows/runs"
)

// Allocation is what the allocator gave a claim: a service, or none.
type Allocation struct {
	Claim   string `json:"claim"`
	Service string `json:"service,omitempty"`
	// gone: the claim is deleted or being deleted (Give does not wake it).
	gone bool
}

// current reads the claim and the service it holds and may keep: one
// that still matches it (healthy or not); the others it holds, which no
// longer match or are one too many, are let go. hint names a service that
// may just have been given to it, read afresh in case the cache does not
// show it yet. A claim that is gone or going returns nil and a Resolution
// that says so.
func (c *Claims) current(ctx context.Context, t runs.ClaimTarget, hint string) (*primazav1alpha1.ServiceClaim, Resolution, *primazav1alpha1.RegisteredService, error) {
	claim, err := c.claim(ctx, t)
	if apierrors.IsNotFound(err) {
		return nil, Resolution{Gone: true}, nil, nil
	}
	if err != nil {
		return nil, Resolution{}, nil, err
	}
	res := Resolution{ClaimUID: claim.UID}
	if !claim.DeletionTimestamp.IsZero() {
		res.Gone = true
		return nil, res, nil, nil
	}
	if err := c.addFinalizer(ctx, claim); err != nil {
		return nil, res, nil, err
	}
	held, err := c.held(ctx, claim.Namespace, claim.UID, hint)
	if err != nil {
		return nil, res, nil, err
	}
	var keep *primazav1alpha1.RegisteredService
	for i := range held {
		svc := &held[i]
		if keep == nil && claims.Match(claim, svc) == claims.Matches && svc.DeletionTimestamp.IsZero() {
			keep = svc
			continue
		}
		if err := c.release(ctx, svc, claim.UID); err != nil {
			return nil, res, nil, err
		}
	}
	return claim, res, keep, nil
}

// Look is Resolve without the take: the claim keeps a service it holds
// while it matches; holding none, it is Pending with the reason when no
// service could be taken, and Wants one otherwise, which the namespace's
// allocator hands out (Allocate). hint names a service the allocator may
// just have given it.
func (c *Claims) Look(ctx context.Context, t runs.ClaimTarget, hint string) (Resolution, error) {
	claim, res, keep, err := c.current(ctx, t, hint)
	if err != nil || claim == nil {
		return res, err
	}
	if keep != nil {
		return resolved(res, keep), nil
	}
	services, err := c.services(ctx, claim.Namespace)
	if err != nil {
		return res, err
	}
	if len(claims.Candidates(claim, services)) == 0 {
		res.State, res.Reason = primazav1alpha1.ClaimPending, claims.WhyPending(claim, services)
		return res, nil
	}
	res.Wants = true
	return res, nil
}

// Ask asks the namespace's allocator for a service for the claim,
// starting the allocator if it does not run.
func (c *Claims) Ask(ctx context.Context, t runs.ClaimTarget) error {
	_, err := c.Temporal.SignalWithStartWorkflow(ctx, runs.AllocatorID(t.Namespace), runs.SignalClaimWants, t.Name,
		runs.AllocatorOptions(t.Namespace), runs.AllocatorType, t.Namespace, []string(nil))
	if err != nil {
		return fmt.Errorf("asking the allocator of %s for a service for claim %s: %w", t.Namespace, t.Name, err)
	}
	return nil
}

// passInFlight bounds the API calls (and wakes) of one allocator pass in
// flight at once: a pass may name hundreds of claims, and made one after
// the other their calls had the pass, which is the namespace's one, set
// the pace of a burst.
const passInFlight = 64

// Allocate hands services to the claims named, from what the API server
// holds now (one list of services, and each claim named): a claim that
// already holds one keeps it (an earlier try whose result was lost); any
// other gets its first candidate no claim of this pass took, marked
// Claimed under the resourceVersion read, so that a health check writing
// the service meanwhile is not overwritten. Only the namespace's allocator
// calls it, one pass at a time, so claims never race each other for a
// service. The claims are read, given a service and their holds written
// passInFlight at a time: each claim's service is decided in memory as
// soon as it is read, one claim at a time.
func (c *Claims) Allocate(ctx context.Context, namespace string, names []string) ([]Allocation, error) {
	return c.allocate(ctx, namespace, names, func(context.Context, Allocation) error { return nil })
}

// allocate is Allocate, calling then with each claim's allocation as soon
// as it is written, so that a pass of hundreds of claims wakes the first
// before it has written the last.
func (c *Claims) allocate(ctx context.Context, namespace string, names []string, then func(context.Context, Allocation) error) ([]Allocation, error) {
	var serviceList primazav1alpha1.RegisteredServiceList
	if err := c.Client.List(ctx, &serviceList, ctrlclient.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the RegisteredServices of %s: %w", namespace, err)
	}
	services := serviceList.Items
	holder := map[string]string{} // claim UID -> service
	for _, svc := range services {
		if ref := svc.Status.ClaimRef; ref != nil {
			holder[string(ref.UID)] = svc.Name
		}
	}
	names = slices.Sorted(slices.Values(names))
	out := make([]Allocation, len(names))
	read := make([]*primazav1alpha1.ServiceClaim, len(names))
	refused := make([]bool, len(names))
	taken := map[string]bool{}
	isTaken := func(name string) bool { return taken[name] }
	var mu sync.Mutex // over taken, while a claim's service is decided
	if err := inParallel(ctx, len(names), func(ctx context.Context, i int) error {
		// Each claim asked for is read afresh: a hold is written under its
		// UID, and a copy a moment old could be of a claim deleted and made
		// again under its name, whose hold no one would release.
		claim, err := c.claim(ctx, runs.ClaimTarget{Namespace: namespace, Name: names[i]})
		if ctrlclient.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading claim %s: %w", names[i], err)
		}
		read[i], out[i] = claim, Allocation{Claim: names[i]}
		var planned *primazav1alpha1.RegisteredService
		switch {
		case claim == nil || !claim.DeletionTimestamp.IsZero():
			out[i].gone = true
		case holder[string(claim.UID)] != "":
			out[i].Service = holder[string(claim.UID)]
		default:
			mu.Lock()
			if planned = claims.Best(claim, services, isTaken); planned != nil {
				taken[planned.Name] = true
			}
			mu.Unlock()
		}
		if planned != nil {
			svc, ok, err := c.take(ctx, claim, planned)
			if err != nil {
				return err
			}
			if refused[i] = !ok; ok {
				out[i].Service = svc.Name
			}
		}
		if refused[i] {
			return nil
		}
		return then(ctx, out[i])
	}); err != nil {
		return nil, err
	}
	// A hold refused (the service deleted or unhealthy since the list) has
	// its claim try its other candidates, one after the other.
	for i := range names {
		if !refused[i] {
			continue
		}
		for candidate := claims.Best(read[i], services, isTaken); candidate != nil; candidate = claims.Best(read[i], services, isTaken) {
			taken[candidate.Name] = true
			svc, ok, err := c.take(ctx, read[i], candidate)
			if err != nil {
				return nil, err
			}
			if ok {
				out[i].Service = svc.Name
				break
			}
		}
		if err := then(ctx, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// inParallel calls f for 0..n-1, passInFlight at a time, and returns the
// first error.
func inParallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(passInFlight)
	for i := range n {
		g.Go(func() error { return f(ctx, i) })
	}
	return g.Wait()
}
