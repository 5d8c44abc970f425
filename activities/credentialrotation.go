package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/internal/rotation"
	"github.com/quartermaster/qm/internal/sharding"
)

// Rotations holds the activities of scheduled credential rotation: a
// rotating binding publishes, in its own Secret, the credentials of a
// successor binding it makes per generation (rotation.Successor), and
// unbinds each predecessor once its overlap is over. The successors are
// ordinary bindings: their own Bind and Unbind runs apply the plan's
// templates, by the rules of OSB rotation.
type Rotations struct {
	Ops *Operations
}

// RotationState is what a rotating binding calls for now.
type RotationState struct {
	// Gone: the binding is deleted or being deleted; its Unbind takes its
	// successors away.
	Gone bool `json:"gone,omitempty"`
	// Rotates: it publishes a successor's credentials. A binding that does
	// not has no rotation to keep.
	Rotates bool `json:"rotates,omitempty"`
	// Generation is the generation of the credentials it publishes.
	Generation int64 `json:"generation,omitempty"`
	// Plan is what is due: a rotation, successors to retire, when to wake.
	Plan rotation.Plan `json:"plan"`
	// MaxPolling bounds the wait for a successor's bind.
	MaxPolling time.Duration `json:"maxPolling,omitempty"`
}

// SuccessorOutcome is where a successor's bind stands.
type SuccessorOutcome struct {
	State       osbv1alpha1.OperationState `json:"state"`
	Description string                     `json:"description,omitempty"`
}

// ReasonRotated and ReasonRotationFailed are the reasons of the Rotated
// condition and of the Events of a rotation.
const (
	ReasonRotated        = "Rotated"
	ReasonRotationFailed = "RotationFailed"
)

// load reads the binding afresh: the workflow's earlier steps, or a
// rotation's, may have changed it.
func (r *Rotations) load(ctx context.Context, tg lifecycle.Target) (*target, error) {
	r.Ops.forget(ctx, tg)
	t, err := r.Ops.load(ctx, tg, lifecycle.OpBind)
	// Nor is this copy kept for the run's next steps (a Bind's Finish):
	// the rotation writes the binding's status.
	r.Ops.forget(ctx, tg)
	return t, err
}

// RotationState reads a rotating binding and says what it calls for now.
func (r *Rotations) RotationState(ctx context.Context, tg lifecycle.Target) (RotationState, error) {
	t, err := r.load(ctx, tg)
	if kind, ok := Permanent(err); ok && kind == ErrGone {
		return RotationState{Gone: true}, nil
	}
	if err != nil {
		return RotationState{}, err
	}
	b := t.binding
	if !b.DeletionTimestamp.IsZero() {
		return RotationState{Gone: true}, nil
	}
	if !rotation.Front(t.plan, b) {
		return RotationState{}, nil
	}
	st := RotationState{Rotates: true, Plan: rotation.Decide(b, rotation.Policy(t.plan, b), time.Now()), MaxPolling: DefaultMaxPolling}
	if b.Status.Rotation != nil {
		st.Generation = b.Status.Rotation.Generation
	}
	if p := t.plan.Spec.MaximumPollingDuration; p != nil {
		st.MaxPolling = time.Duration(*p) * time.Second
	}
	return st, nil
}

// BindSuccessor makes the successor of generation gen, rotating the one
// whose credentials the binding publishes. It is idempotent: a successor
// made already, or a generation published already, is left as it is.
func (r *Rotations) BindSuccessor(ctx context.Context, tg lifecycle.Target, gen int64) error {
	t, err := r.load(ctx, tg)
	if err != nil {
		return err
	}
	b := t.binding
	st := b.Status.Rotation
	if st != nil && st.Generation >= gen || !b.DeletionTimestamp.IsZero() {
		return nil
	}
	if st == nil {
		// Recorded before the first successor exists: from now on the
		// binding's Unbind knows it has successors to take away.
		base := b.DeepCopy()
		b.Status.Rotation = &osbv1alpha1.RotationStatus{}
		if err := r.Ops.Client.Status().Patch(ctx, b, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("recording that binding %s/%s rotates: %w", b.Namespace, b.Name, err)
		}
		st = b.Status.Rotation
	}
	s := rotation.Successor(b, gen, st.Current)
	sharding.Stamp(s) // its instance's shard's from the start, as the OSB API's bindings
	err = r.Ops.Client.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating successor binding %s/%s: %w", s.Namespace, s.Name, err)
		}
		return nil
	}
	// Made by an earlier attempt: this one's, unless that attempt failed
	// and its successor is still being unbound; it is made afresh once
	// that is done (the step is retried).
	var have osbv1alpha1.SFServiceBinding
	if err := r.Ops.Client.Get(ctx, client.ObjectKeyFromObject(s), &have); err != nil {
		return fmt.Errorf("reading successor binding %s/%s: %w", s.Namespace, s.Name, err)
	}
	if !have.DeletionTimestamp.IsZero() {
		return fmt.Errorf("successor binding %s/%s of a failed attempt is still being unbound", s.Namespace, s.Name)
	}
	return nil
}

// SuccessorState reads where the bind of the successor of generation gen
// stands.
func (r *Rotations) SuccessorState(ctx context.Context, tg lifecycle.Target, gen int64) (SuccessorOutcome, error) {
	var s osbv1alpha1.SFServiceBinding
	err := r.Ops.Client.Get(ctx, client.ObjectKey{Namespace: tg.Namespace, Name: rotation.SuccessorName(tg.Name, gen)}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return SuccessorOutcome{State: osbv1alpha1.StateFailed, Description: "the successor binding " + rotation.SuccessorName(tg.Name, gen) + " was deleted"}, nil
	case err != nil:
		return SuccessorOutcome{}, fmt.Errorf("reading successor binding %s: %w", rotation.SuccessorName(tg.Name, gen), err)
	case !s.DeletionTimestamp.IsZero():
		return SuccessorOutcome{State: osbv1alpha1.StateFailed, Description: "the successor binding " + s.Name + " is being deleted"}, nil
	case s.Status.ObservedGeneration < s.Generation || s.Status.State == "":
		return SuccessorOutcome{State: osbv1alpha1.StateInProgress, Description: "waiting for its bind to begin"}, nil
	}
	return SuccessorOutcome{State: s.Status.State, Description: s.Status.Description}, nil
}

// PublishSuccessor writes the credentials of the successor of generation gen into
// the binding's Secret, the same name each time, with one write, so that
// each workload that projects it rolls once; then the status: the bind
// response with OSB's expiry, the rotation, the Rotated condition. A
// generation published already is not written again.
func (r *Rotations) PublishSuccessor(ctx context.Context, tg lifecycle.Target, gen int64, why string) error {
	t, err := r.load(ctx, tg)
	if err != nil {
		return err
	}
	b := t.binding
	if b.Status.Rotation != nil && b.Status.Rotation.Generation >= gen {
		return nil
	}
	var s osbv1alpha1.SFServiceBinding
	name := rotation.SuccessorName(b.Name, gen)
	if err := r.Ops.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &s); err != nil {
		return fmt.Errorf("reading successor binding %s: %w", name, err)
	}
	var creds corev1.Secret
	if err := t.kube.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: s.Status.Response.SecretRef}, &creds); err != nil {
		return fmt.Errorf("reading the credentials of successor binding %s: %w", name, err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentialsName(b), Namespace: b.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, t.kube, secret, func() error {
		secret.Data = maps.Clone(creds.Data)
		secret.Annotations = maps.Clone(creds.Annotations)
		secret.Labels = nil
		kubenames.SetLabel(secret, osbv1alpha1.CredentialsBindingLabel, b.Name)
		if t.remote {
			return nil
		}
		return controllerutil.SetOwnerReference(b, secret, r.Ops.Client.Scheme())
	}); err != nil {
		return fmt.Errorf("writing the credentials Secret %s/%s: %w", b.Namespace, secret.Name, err)
	}
	policy := rotation.Policy(t.plan, b)
	now := time.Now()
	base := b.DeepCopy()
	b.Status.Response = *s.Status.Response.DeepCopy()
	b.Status.Response.SecretRef = secret.Name
	if policy != nil {
		b.Status.Response.Metadata = rotation.Expiry(policy, now)
	}
	if !t.remote {
		b.Status.Binding = &osbv1alpha1.SecretReference{Name: secret.Name}
	}
	b.Status.Rotation = rotation.Published(b, policy, gen, name, now)
	msg := fmt.Sprintf("generation %d published (%s), from successor binding %s", gen, why, name)
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: osbv1alpha1.ConditionRotated, Status: metav1.ConditionTrue,
		Reason: ReasonRotated, Message: msg, ObservedGeneration: b.Generation})
	if err := r.Ops.Client.Status().Patch(ctx, b, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("recording the rotation of binding %s/%s: %w", b.Namespace, b.Name, err)
	}
	r.event(b, corev1.EventTypeNormal, ReasonRotated, "credentials rotated: "+msg)
	metrics.Rotated(b.Spec.ServiceID, b.Spec.PlanID, metrics.Succeeded)
	return nil
}

// RotationFailed records a successor that did not bind: the credentials
// the binding publishes stay, and its Rotated condition, an Event and the
// metric say why. The successor is deleted, so that its Unbind takes away
// whatever it had applied.
func (r *Rotations) RotationFailed(ctx context.Context, tg lifecycle.Target, gen int64, description string) error {
	t, err := r.load(ctx, tg)
	if err != nil {
		return err
	}
	b := t.binding
	if err := r.deleteSuccessor(ctx, b, rotation.SuccessorName(b.Name, gen)); err != nil {
		return err
	}
	kept := "no credentials yet"
	if b.Status.Rotation != nil && b.Status.Rotation.Current != "" {
		kept = "the credentials of " + b.Status.Rotation.Current + " stay"
	}
	msg := fmt.Sprintf("generation %d failed: %s; %s", gen, description, kept)
	c := meta.FindStatusCondition(b.Status.Conditions, osbv1alpha1.ConditionRotated)
	if c == nil || c.Message != msg {
		base := b.DeepCopy()
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: osbv1alpha1.ConditionRotated, Status: metav1.ConditionFalse,
			Reason: ReasonRotationFailed, Message: msg, ObservedGeneration: b.Generation})
		if err := r.Ops.Client.Status().Patch(ctx, b, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("recording the failed rotation of binding %s/%s: %w", b.Namespace, b.Name, err)
		}
		r.event(b, corev1.EventTypeWarning, ReasonRotationFailed, "credentials not rotated: "+msg)
	}
	metrics.Rotated(b.Spec.ServiceID, b.Spec.PlanID, metrics.Failed)
	return nil
}

// RetireSuccessor unbinds a successor whose overlap is over (its Unbind run takes
// its credentials away) and drops it from the binding's retiring ones.
func (r *Rotations) RetireSuccessor(ctx context.Context, tg lifecycle.Target, successor string) error {
	var b osbv1alpha1.SFServiceBinding
	if err := r.Ops.Client.Get(ctx, client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}, &b); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.deleteSuccessor(ctx, &b, successor); err != nil {
		return err
	}
	if b.Status.Rotation == nil {
		return nil
	}
	base := b.DeepCopy()
	b.Status.Rotation = rotation.Retired(b.Status.Rotation, successor)
	if err := r.Ops.Client.Status().Patch(ctx, &b, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("recording the retirement of %s on binding %s/%s: %w", successor, b.Namespace, b.Name, err)
	}
	return nil
}

// RemoveSuccessors deletes every successor of a rotating binding being
// unbound, and says how many are left: each goes once its own Unbind is
// done.
func (r *Rotations) RemoveSuccessors(ctx context.Context, tg lifecycle.Target) (int, error) {
	var b osbv1alpha1.SFServiceBinding
	if err := r.Ops.Client.Get(ctx, client.ObjectKey{Namespace: tg.Namespace, Name: tg.Name}, &b); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	var list osbv1alpha1.SFServiceBindingList
	if err := r.Ops.Client.List(ctx, &list, client.InNamespace(b.Namespace), client.MatchingLabels{osbv1alpha1.RotationOfLabel: string(b.UID)}); err != nil {
		return 0, fmt.Errorf("listing the successors of binding %s/%s: %w", b.Namespace, b.Name, err)
	}
	for i := range list.Items {
		if err := r.deleteSuccessor(ctx, &b, list.Items[i].Name); err != nil {
			return 0, err
		}
	}
	return len(list.Items), nil
}

// deleteSuccessor deletes the successor name of b, if it is b's.
func (r *Rotations) deleteSuccessor(ctx context.Context, b *osbv1alpha1.SFServiceBinding, name string) error {
	var s osbv1alpha1.SFServiceBinding
	err := r.Ops.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading successor binding %s: %w", name, err)
	case s.Labels[osbv1alpha1.RotationOfLabel] != string(b.UID):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("binding %s is not a successor of %s/%s: left alone", name, b.Namespace, b.Name), ErrRotation, errors.New("not a successor"))
	case !s.DeletionTimestamp.IsZero():
		return nil
	}
	if err := r.Ops.Client.Delete(ctx, &s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting successor binding %s: %w", name, err)
	}
	return nil
}

// event records an Event on the binding, when there is a recorder.
func (r *Rotations) event(b *osbv1alpha1.SFServiceBinding, kind, reason, msg string) {
	if r.Ops.Events != nil {
		r.Ops.Events.Event(b, kind, reason, msg)
	}
}
