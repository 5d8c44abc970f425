package api

import (
	"context"
	"net/http"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Platforms poll last_operation far more often than anything else; those
// polls are answered from the informer cache (Server.Cache) when that is
// safe, and from the API server otherwise. The rule: the cached copy must
// speak of the operation the poll asks for. A copy that has not yet seen an
// operation this replica (or another) just accepted still names the one
// before it ("provision" for a poll of "update-2", an instance without a
// deletion for "deprovision"), or is missing; both fall back to a direct
// read, so a platform never sees its own operation missing or stale. A poll
// that names no operation reads directly. The other way round, an
// operation that has just ended may still be "in progress" in the cache for
// as long as the watch lags (milliseconds); the platform's next poll sees
// the end.

// polledInstance reads the instance that a last_operation for asked
// concerns.
func (s *Server) polledInstance(ctx context.Context, id, asked string, missing int) (*osbv1alpha1.SFServiceInstance, *requestError) {
	if s.Cache != nil && asked != "" {
		if inst, e := s.instanceFrom(ctx, s.Cache, id, missing); e == nil && instanceOperation(inst) == asked {
			return inst, nil
		}
	}
	return s.instance(ctx, id, missing)
}

// polledBinding reads the binding that a last_operation for asked
// concerns.
func (s *Server) polledBinding(ctx context.Context, iid, bid, asked string, missing int) (*osbv1alpha1.SFServiceBinding, *requestError) {
	if s.Cache != nil && asked != "" {
		if b, e := s.bindingFrom(ctx, s.Cache, iid, bid, missing); e == nil && bindingOperation(b) == asked {
			return b, nil
		}
	}
	return s.binding(ctx, iid, bid, missing)
}

// pollMissing is the status of a poll for an operation whose resource is
// gone: 410 Gone for a removal, 404 otherwise.
func pollMissing(asked, removal string) int {
	if asked == removal {
		return http.StatusGone
	}
	return http.StatusNotFound
}
