package activities

import (
	"cmp"
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
	"k8s.io/apimachinery/pkg/types"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/workflows/runs"
)

// Settling is Settle's input: the claim, and what its workflow knows of it.
type Settling struct {
	Claim runs.ClaimTarget `json:"claim"`
	// Given names the service the allocator said it gave the claim since
	// the last step, if it did.
	Given string `json:"given,omitempty"`
	// UID is the claim's UID as its workflow last saw it: a claim already
	// gone from the API server lets go of what it held under it.
	UID types.UID `json:"uid,omitempty"`
}

// Settle is one resolution of a claim, in one step that reads the claim
// once:
//
//   - a claim that holds a service that still matches it keeps it: its
//     binding Secret and its status are written from that service
//     (Resolved);
//   - one that holds none asks its namespace's allocator for one when a
//     service it could take looks Available (Wants: its workflow waits for
//     the answer), and is recorded Pending, saying why, otherwise;
//   - one that is deleted lets go of its services, its Secret, its
//     projection and its finalizer (Gone).
//
// Look, Ask, Bind, Record and Release do the same in five steps, for the
// runs from before it.
func (c *Claims) Settle(ctx context.Context, s Settling) (Resolution, error) {
	claim, res, keep, err := c.current(ctx, s.Claim, s.Given)
	if err != nil {
		return res, err
	}
	if claim == nil {
		return res, c.letGo(ctx, s.Claim, cmp.Or(res.ClaimUID, s.UID), s.Given)
	}
	if keep != nil {
		res = resolved(res, keep)
		binding, err := c.bind(ctx, claim, keep)
		if err != nil {
			return res, err
		}
		return res, c.record(ctx, claim, res, binding)
	}
	services, err := c.services(ctx, claim.Namespace)
	if err != nil {
		return res, err
	}
	if claims.Best(claim, services, func(string) bool { return false }) != nil {
		res.Wants = true
		return res, c.Ask(ctx, s.Claim)
	}
	res.State, res.Reason = primazav1alpha1.ClaimPending, claims.WhyPending(claim, services)
	return res, c.record(ctx, claim, res, "")
}

// Give is one pass of the namespace's allocator: it hands services to the
// claims named (Allocate) and wakes each with what it got
// (runs.SignalClaimChanged) as soon as its hold is written, starting its
// workflow if it does not run: a new claim's ask comes from the watcher,
// and its workflow's first step is then to resolve it with the service
// given. Waking from here rather than from the allocator's workflow spares
// that history two events per claim. A claim that is gone is not woken
// (its deletion woke it). A pass retried after a failure hands each claim
// what it already holds and wakes it again, which only has it look once
// more.
func (c *Claims) Give(ctx context.Context, namespace string, names []string) error {
	_, err := c.allocate(ctx, namespace, names, func(ctx context.Context, g Allocation) error {
		// The SDK sends at most one heartbeat per throttle interval.
		activity.RecordHeartbeat(ctx)
		if g.gone {
			return nil
		}
		_, err := c.Temporal.SignalWithStartWorkflow(ctx, runs.ClaimID(namespace, g.Claim), runs.SignalClaimChanged, g.Service,
			runs.ClaimOptions(namespace, g.Claim), runs.ClaimType, runs.ClaimTarget{Namespace: namespace, Name: g.Claim})
		if err != nil {
			return fmt.Errorf("waking claim %s: %w", g.Claim, err)
		}
		return nil
	})
	return err
}
