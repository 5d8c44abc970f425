package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/claims"
	"github.com/quartermaster/qm/workflows/runs"
)

// Claims are the activities of a ServiceClaim's workflow: resolve the
// claim to a service it holds alone, write its binding Secret, record the
// outcome, and release the service when the claim goes.
type Claims struct {
	// Client reads what must be fresh and writes.
	Client ctrlclient.Client
	// Cache lists the candidate services and serves the read that may be a
	// moment old (a held service's endpoint, for the Secret); nil reads
	// through Client.
	Cache ctrlclient.Reader
	// Temporal reaches the namespaces' allocators (Ask).
	Temporal client.Client
}

// Resolution is what Resolve found: names and states, never values.
type Resolution struct {
	State primazav1alpha1.ClaimState `json:"state"`
	// ClaimUID is the claim's; release goes by it.
	ClaimUID types.UID `json:"claimUID,omitempty"`
	// Gone: the claim is deleted or being deleted.
	Gone bool `json:"gone,omitempty"`
	// Service and ServiceUID name the service held.
	Service    string    `json:"service,omitempty"`
	ServiceUID types.UID `json:"serviceUID,omitempty"`
	// ServiceState and ServiceMessage say how the held service is.
	ServiceState   primazav1alpha1.ServiceState `json:"serviceState,omitempty"`
	ServiceMessage string                       `json:"serviceMessage,omitempty"`
	// Reason says why the claim is Pending.
	Reason string `json:"reason,omitempty"`
	// Wants: the claim holds nothing and services it could take look
	// Available; the namespace's allocator decides which it gets (Look;
	// Settle has asked it).
	Wants bool `json:"wants,omitempty"`
}

// Resolve finds the service the claim holds, or takes one: the claim keeps
// a service it holds while that service still matches it (healthy or
// not); otherwise it takes the first candidate (claims.Candidates) whose
// status it can mark Claimed with the resourceVersion it read. That
// precondition is the lock: of two claims racing for one service, the
// second write fails, and that claim reads again and moves on.
func (c *Claims) Resolve(ctx context.Context, t runs.ClaimTarget) (Resolution, error) {
	claim, res, keep, err := c.current(ctx, t, "")
	if err != nil || claim == nil {
		return res, err
	}
	if keep != nil {
		return resolved(res, keep), nil
	}
	// Each try takes the first candidate; one lost to another claim is
	// struck off, and the candidates are listed again from the cache,
	// which by then shows most other claims' holds too.
	lost := map[string]bool{}
	for {
		services, err := c.services(ctx, claim.Namespace)
		if err != nil {
			return res, err
		}
		candidates := slices.DeleteFunc(claims.Candidates(claim, services), func(s *primazav1alpha1.RegisteredService) bool { return lost[s.Name] })
		if len(candidates) == 0 {
			res.State, res.Reason = primazav1alpha1.ClaimPending, claims.WhyPending(claim, services)
			return res, nil
		}
		svc, ok, err := c.take(ctx, claim, candidates[0])
		if err != nil {
			return res, err
		}
		if ok {
			return resolved(res, svc), nil
		}
		lost[candidates[0].Name] = true
	}
}

// take marks the service as held by claim, if it can still be claimed.
// The first try patches the cached copy under its resourceVersion, which
// succeeds only if the copy is current; a conflict reads the service
// afresh and tries again, or gives up on a service another claim took.
func (c *Claims) take(ctx context.Context, claim *primazav1alpha1.ServiceClaim, cached *primazav1alpha1.RegisteredService) (*primazav1alpha1.RegisteredService, bool, error) {
	svc := cached.DeepCopy()
	for {
		if ref := svc.Status.ClaimRef; ref != nil && ref.UID == claim.UID {
			// Taken by an earlier run of this step, whose result was lost.
			return svc, true, nil
		}
		if !claims.Claimable(svc) || claims.Match(claim, svc) != claims.Matches {
			return nil, false, nil
		}
		base := svc.DeepCopy()
		svc.Status.State = primazav1alpha1.ServiceClaimed
		svc.Status.ClaimRef = &primazav1alpha1.ClaimReference{Name: claim.Name, UID: claim.UID}
		err := c.Client.Status().Patch(ctx, svc, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return svc, true, nil
		case apierrors.IsNotFound(err):
			return nil, false, nil
		case !apierrors.IsConflict(err):
			return nil, false, fmt.Errorf("claiming service %s: %w", svc.Name, err)
		}
		// Into a new object: a Get into this one would keep the claimRef
		// just set wherever the stored status has none.
		svc = &primazav1alpha1.RegisteredService{}
		if err := c.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(base), svc); err != nil {
			return nil, false, ctrlclient.IgnoreNotFound(err)
		}
	}
}

// Bind writes the claim's binding Secret from the service it holds, owned
// by the claim, and returns its name ("" if the service is gone); an
// unchanged Secret is not written.
//
// The service is read from the cache: a value a moment old is rewritten
// when the change's own event wakes the claim again. The claim is read
// afresh: the Secret's owner is its UID, and a claim deleted and made
// again under its name must not own the Secret through the old one.
func (c *Claims) Bind(ctx context.Context, t runs.ClaimTarget, service string) (string, error) {
	claim, err := c.claim(ctx, t)
	if err != nil {
		return "", ctrlclient.IgnoreNotFound(err)
	}
	var svc primazav1alpha1.RegisteredService
	if err := c.cached(ctx, types.NamespacedName{Namespace: t.Namespace, Name: service}, &svc); err != nil {
		// A service deleted since it was resolved: no binding, and the
		// workflow resolves again.
		return "", ctrlclient.IgnoreNotFound(err)
	}
	return c.bind(ctx, claim, &svc)
}

// bind writes the binding Secret of claim, as read afresh, from svc, the
// service it holds, and returns its name.
func (c *Claims) bind(ctx context.Context, claim *primazav1alpha1.ServiceClaim, svc *primazav1alpha1.RegisteredService) (string, error) {
	data, err := claims.Binding(claim, svc, func(ref *primazav1alpha1.SecretKeyRef) ([]byte, error) {
		var s corev1.Secret
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}, &s); err != nil {
			return nil, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			return nil, fmt.Errorf("Secret %s has no key %q", ref.Name, ref.Key)
		}
		return v, nil
	})
	if err != nil {
		return "", err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace}, Data: data}
	if err := controllerutil.SetControllerReference(claim, secret, c.Client.Scheme()); err != nil {
		return "", err
	}
	// A claim's first binding is a create. A claim whose status names its
	// Secret already is settled again (its service changed, a worker
	// restarted): a read, and a write only if the values changed, so that
	// a claim at rest writes nothing.
	if claim.Status.Binding == nil {
		if err := c.Client.Create(ctx, secret); !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return "", fmt.Errorf("writing the binding Secret %s: %w", claim.Name, err)
			}
			return secret.Name, nil
		}
	}
	secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace}}
	_, err = controllerutil.CreateOrUpdate(ctx, c.Client, secret, func() error {
		if secret.UID != "" && !metav1.IsControlledBy(secret, claim) {
			// Someone else's Secret of the claim's name: a claim never
			// takes it over, which would hand its values to the claim's
			// workloads or overwrite them.
			return &secretConflict{name: secret.Name}
		}
		if maps.EqualFunc(secret.Data, data, bytes.Equal) {
			return nil
		}
		secret.Data = data
		return controllerutil.SetControllerReference(claim, secret, c.Client.Scheme())
	})
	var conflict *secretConflict
	if errors.As(err, &conflict) {
		return "", c.reportConflict(ctx, claim, conflict)
	}
	if err != nil {
		return "", fmt.Errorf("writing the binding Secret %s: %w", claim.Name, err)
	}
	return secret.Name, nil
}

// secretConflict is a Secret of a claim's name that the claim does not own.
type secretConflict struct{ name string }

func (e *secretConflict) Error() string {
	return fmt.Sprintf("Secret %s exists and is not this claim's: the claim writes nothing until it is removed, or the claim is renamed", e.name)
}

// reportConflict shows the conflict on the claim (Resolved, reason
// SecretConflict) and returns it, so that the step retries until the
// Secret is gone.
func (c *Claims) reportConflict(ctx context.Context, claim *primazav1alpha1.ServiceClaim, conflict *secretConflict) error {
	base := claim.DeepCopy()
	if meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: "Resolved", Status: metav1.ConditionFalse,
		Reason: "SecretConflict", Message: conflict.Error(), ObservedGeneration: claim.Generation}) {
		if err := c.Client.Status().Patch(ctx, claim, ctrlclient.MergeFrom(base)); err != nil {
			return fmt.Errorf("%w (and recording it: %v)", conflict, err)
		}
	}
	return conflict
}

// Record writes the claim's status from res and the binding's name; a
// Pending claim loses its binding Secret, which spoke of a service it no
// longer holds.
func (c *Claims) Record(ctx context.Context, t runs.ClaimTarget, res Resolution, binding string) error {
	claim, err := c.claim(ctx, t)
	if err != nil {
		return ctrlclient.IgnoreNotFound(err)
	}
	return c.record(ctx, claim, res, binding)
}

// record writes the status of claim, as read afresh, from res and the
// binding's name (Record).
func (c *Claims) record(ctx context.Context, claim *primazav1alpha1.ServiceClaim, res Resolution, binding string) error {
	if res.State == primazav1alpha1.ClaimPending {
		if err := c.deleteBinding(ctx, claim); err != nil {
			return err
		}
	}
	st := claim.Status.DeepCopy()
	st.State, st.ObservedGeneration = res.State, claim.Generation
	st.RegisteredService, st.RegisteredServiceUID, st.Binding = res.Service, res.ServiceUID, nil
	if st.ClaimID == "" {
		st.ClaimID = string(claim.UID)
	}
	if binding != "" {
		st.Binding = &primazav1alpha1.BindingReference{Name: binding}
	}
	resolvedCond := metav1.Condition{Type: "Resolved", Status: metav1.ConditionFalse, Reason: "NoMatch", Message: res.Reason, ObservedGeneration: claim.Generation}
	if res.State == primazav1alpha1.ClaimResolved {
		resolvedCond = metav1.Condition{Type: "Resolved", Status: metav1.ConditionTrue, Reason: "Claimed",
			Message: fmt.Sprintf("holds service %s; its endpoint is in Secret %s", res.Service, binding), ObservedGeneration: claim.Generation}
	}
	meta.SetStatusCondition(&st.Conditions, resolvedCond)
	if err := c.recordProjection(ctx, claim, st, res.State == primazav1alpha1.ClaimResolved && binding != ""); err != nil {
		return err
	}
	health := metav1.Condition{Type: "ServiceAvailable", Status: metav1.ConditionTrue, Reason: "Claimed", Message: "the service is healthy", ObservedGeneration: claim.Generation}
	switch {
	case res.State != primazav1alpha1.ClaimResolved:
		meta.RemoveStatusCondition(&st.Conditions, health.Type)
	case res.ServiceState != primazav1alpha1.ServiceClaimed:
		health.Status, health.Reason = metav1.ConditionFalse, "Service"+string(res.ServiceState)
		health.Message = fmt.Sprintf("the service is %s: %s", res.ServiceState, res.ServiceMessage)
		meta.SetStatusCondition(&st.Conditions, health)
	default:
		meta.SetStatusCondition(&st.Conditions, health)
	}
	if equality.Semantic.DeepEqual(claim.Status, *st) {
		return nil
	}
	base := claim.DeepCopy()
	claim.Status = *st
	if err := c.Client.Status().Patch(ctx, claim, ctrlclient.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing the claim's status: %w", err)
	}
	return nil
}

func (c *Claims) reader() ctrlclient.Reader {
	if c.Cache != nil {
		return c.Cache
	}
	return c.Client
}

func (c *Claims) services(ctx context.Context, namespace string) ([]primazav1alpha1.RegisteredService, error) {
	// The cache's own objects, not copies: they are read, never changed.
	var list primazav1alpha1.RegisteredServiceList
	if err := c.reader().List(ctx, &list, ctrlclient.InNamespace(namespace), ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing RegisteredServices: %w", err)
	}
	return list.Items, nil
}

// cached reads key into obj from the cache, or from the API server if the
// cache does not have it (yet).
func (c *Claims) cached(ctx context.Context, key types.NamespacedName, obj ctrlclient.Object) error {
	if c.Cache != nil {
		if err := c.Cache.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
			return err
		}
	}
	return c.Client.Get(ctx, key, obj)
}

func (c *Claims) claim(ctx context.Context, t runs.ClaimTarget) (*primazav1alpha1.ServiceClaim, error) {
	var claim primazav1alpha1.ServiceClaim
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, &claim); err != nil {
		return nil, err
	}
	return &claim, nil
}

func (c *Claims) addFinalizer(ctx context.Context, claim *primazav1alpha1.ServiceClaim) error {
	base := claim.DeepCopy()
	if !controllerutil.AddFinalizer(claim, primazav1alpha1.ClaimFinalizer) {
		return nil
	}
	if err := c.Client.Patch(ctx, claim, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding the claim's finalizer: %w", err)
	}
	return nil
}

func (c *Claims) deleteBinding(ctx context.Context, claim *primazav1alpha1.ServiceClaim) error {
	var s corev1.Secret
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, &s)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(&s, claim)) {
		return nil
	}
	if err == nil {
		err = c.Client.Delete(ctx, &s)
	}
	if ctrlclient.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the binding Secret %s: %w", claim.Name, err)
	}
	return nil
}

// resolved is res for a claim that holds svc.
func resolved(res Resolution, svc *primazav1alpha1.RegisteredService) Resolution {
	res.State, res.Service, res.ServiceUID, res.ServiceState = primazav1alpha1.ClaimResolved, svc.Name, svc.UID, svc.Status.State
	if c := meta.FindStatusCondition(svc.Status.Conditions, "Healthy"); c != nil {
		res.ServiceMessage = c.Message
	}
	return res
}
