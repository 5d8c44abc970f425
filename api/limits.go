package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/limits"
)

// OrganizationLabel marks an OSB instance with its organization (a
// Kubernetes platform's context namespace, else the organization_guid), by
// which the API counts an organization's instances.
const OrganizationLabel = "quartermaster.io/organization"

// Limits are the operator's limits on OSB provisions (a plan's own is its
// maxInstances). Zero is no limit.
type Limits struct {
	// InstancesPerOrganization bounds each organization's instances.
	InstancesPerOrganization int
}

// keyedLocks serialize the check and the record of provisions that one
// limit counts, so that two at once never both take its last place. The
// count is a read from the API server, which sees every create before it.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (k *keyedLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*sync.Mutex{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &sync.Mutex{}
		k.locks[key] = l
	}
	k.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// organizationOf is the organization a provision request is made for, as
// fairness keys it: "" for none.
func organizationOf(req *provisionRequest) string {
	return fairness.Organization(req.Context, req.OrganizationGUID)
}

// admit checks a provision of instance id against its plan's maxInstances
// and its organization's limit, and holds both until release: the caller
// records the instance in between. A repeated request for an instance that
// exists is not counted again.
func (s *Server) admit(ctx context.Context, id string, plan *osbv1alpha1.SFPlan, org string) (release func(), e *requestError) {
	var checks []func() *requestError
	var unlocks []func()
	release = func() {
		for _, u := range unlocks {
			u()
		}
	}
	if max := plan.Spec.MaxInstances; max != nil {
		unlocks = append(unlocks, s.limitLocks.lock("plan/"+plan.Spec.ID))
		checks = append(checks, func() *requestError {
			return s.admitCount(ctx, limits.Limit{Of: fmt.Sprintf("plan %q", plan.Spec.Name), Max: int(*max)},
				client.MatchingFields{"spec.planId": plan.Spec.ID})
		})
	}
	if max := s.Limits.InstancesPerOrganization; max > 0 && org != "" {
		unlocks = append(unlocks, s.limitLocks.lock("org/"+org))
		checks = append(checks, func() *requestError {
			return s.admitCount(ctx, limits.Limit{Of: fmt.Sprintf("organization %q", org), Max: max},
				client.InNamespace(s.Namespace), client.MatchingLabels{OrganizationLabel: kubenames.LabelValue(org)})
		})
	}
	if len(checks) == 0 {
		return release, nil
	}
	var existing osbv1alpha1.SFServiceInstance
	switch err := s.Kube.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ResourceName(id)}, &existing); {
	case err == nil:
		return release, nil // a repeat, which record answers
	case !apierrors.IsNotFound(err):
		release()
		return nil, failure("reading instance "+id, err)
	}
	for _, check := range checks {
		if e := check(); e != nil {
			release()
			return nil, e
		}
	}
	return release, nil
}

// admitCount counts the instances opts select, as metadata, and refuses
// one more beyond l.
func (s *Server) admitCount(ctx context.Context, l limits.Limit, opts ...client.ListOption) *requestError {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(osbv1alpha1.GroupVersion.WithKind("SFServiceInstanceList"))
	if err := s.Kube.List(ctx, list, opts...); err != nil {
		return failure("counting the instances of "+l.Of, err)
	}
	count := 0
	for _, i := range list.Items {
		if i.DeletionTimestamp == nil {
			count++
		}
	}
	if err := limits.Admit(l, count); err != nil {
		return &requestError{status: http.StatusForbidden, description: err.Error()}
	}
	return nil
}

// quotaRefusal is the API server's refusal of an instance beyond its
// namespace's ResourceQuota, which the API passes on as a 403 with the
// API server's words; nil for any other error.
func quotaRefusal(what string, err error) *requestError {
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		return nil
	}
	return &requestError{status: http.StatusForbidden, description: what + " would exceed its namespace's limit: " + err.Error()}
}
