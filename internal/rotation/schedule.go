package rotation

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/kubenames"
)

// Scheduled rotation (Quartermaster's own, beside OSB's): a binding with a
// policy publishes the credentials of a successor binding it makes, one
// per generation, each rotating the one before by the rules above. The
// binding itself never holds credentials of its own, so that every set of
// credentials, the first included, is unbound the same way: by deleting
// the successor that holds it.

// Policy is the rotation a binding follows: its own, else its plan's
// default; nil when its credentials do not rotate. A successor never
// rotates: its rotating binding does.
func Policy(p *osbv1alpha1.SFPlan, b *osbv1alpha1.SFServiceBinding) *osbv1alpha1.CredentialRotation {
	switch {
	case IsSuccessor(b):
		return nil
	case b.Spec.Rotation != nil:
		return b.Spec.Rotation
	}
	return p.Spec.BindingRotation
}

// Front says whether binding b publishes the credentials of successors
// rather than holding its own: it has a policy of its own, it began to
// rotate already, or its plan's default was set before it was first
// bound (a binding bound with credentials of its own keeps them).
func Front(p *osbv1alpha1.SFPlan, b *osbv1alpha1.SFServiceBinding) bool {
	switch {
	case IsSuccessor(b):
		return false
	case b.Spec.Rotation != nil, b.Status.Rotation != nil:
		return true
	}
	return p.Spec.BindingRotation != nil && b.Status.AppliedSpec == nil && len(b.Status.Resources) == 0
}

// CheckPolicy says why a binding's own policy cannot be honoured: its
// plan's bindings do not rotate.
func CheckPolicy(p *osbv1alpha1.SFPlan, b *osbv1alpha1.SFServiceBinding) error {
	if b.Spec.Rotation != nil && !Rotatable(p) {
		return refuse("plan %q does not rotate bindings (its bindingRotatable is not true): spec.rotation cannot be honoured", p.Spec.Name)
	}
	return nil
}

// IsSuccessor says whether b was made by a rotating binding.
func IsSuccessor(b *osbv1alpha1.SFServiceBinding) bool {
	return b.Labels[osbv1alpha1.RotationOfLabel] != ""
}

// SuccessorName names the successor of generation gen of the binding
// named front.
func SuccessorName(front string, gen int64) string {
	return kubenames.Bounded("", fmt.Sprintf("%s-r%d", front, gen))
}

// Successor is the binding that holds generation gen of front's
// credentials: front's request, under an ID of its own, rotating
// predecessor (none for the first generation). It is owned by front.
func Successor(front *osbv1alpha1.SFServiceBinding, gen int64, predecessor string) *osbv1alpha1.SFServiceBinding {
	spec := *front.Spec.DeepCopy()
	spec.ID = kubenames.Bounded("", fmt.Sprintf("%s-r%d", front.Spec.ID, gen))
	spec.Rotation = nil
	spec.PredecessorBinding = predecessor
	spec.AcceptsIncomplete = true
	return &osbv1alpha1.SFServiceBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: SuccessorName(front.Name, gen), Namespace: front.Namespace,
			Labels: map[string]string{osbv1alpha1.RotationOfLabel: string(front.UID)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: osbv1alpha1.GroupVersion.String(), Kind: "SFServiceBinding",
				Name: front.Name, UID: front.UID,
			}},
		},
		Spec: spec,
	}
}

// Forced is the value of the rotate annotation that asks for a rotation
// not yet honoured; "" when none does.
func Forced(b *osbv1alpha1.SFServiceBinding) string {
	v := b.Annotations[osbv1alpha1.RotateAnnotation]
	if v == "" || b.Status.Rotation != nil && b.Status.Rotation.Forced == v {
		return ""
	}
	return v
}

// Plan is what a rotating binding calls for now.
type Plan struct {
	// Rotate: a successor is due (the schedule, or the annotation).
	Rotate bool `json:"rotate,omitempty"`
	// Why says what calls for the rotation ("scheduled", "forced by the
	// annotation", "first credentials").
	Why string `json:"why,omitempty"`
	// Retire are the successors whose overlap has ended.
	Retire []string `json:"retire,omitempty"`
	// Wake is when the next of those falls due; zero: nothing is scheduled.
	Wake time.Time `json:"wake"`
}

// Decide says what a rotating binding b with policy calls for at now.
func Decide(b *osbv1alpha1.SFServiceBinding, policy *osbv1alpha1.CredentialRotation, now time.Time) Plan {
	var p Plan
	st := b.Status.Rotation
	if st == nil {
		st = &osbv1alpha1.RotationStatus{}
	}
	wake := func(t time.Time) {
		if p.Wake.IsZero() || t.Before(p.Wake) {
			p.Wake = t
		}
	}
	for _, r := range st.Retiring {
		if !now.Before(r.Until.Time) {
			p.Retire = append(p.Retire, r.Binding)
			continue
		}
		wake(r.Until.Time)
	}
	switch {
	case st.Generation == 0:
		p.Rotate, p.Why = true, "first credentials"
	case Forced(b) != "":
		p.Rotate, p.Why = true, fmt.Sprintf("forced by the annotation %s=%s", osbv1alpha1.RotateAnnotation, Forced(b))
	case policy == nil:
		// The plan's default was removed: the credentials stay.
	default:
		next := Next(st, policy)
		if !now.Before(next) {
			p.Rotate, p.Why = true, "scheduled"
			break
		}
		wake(next)
	}
	return p
}

// Next is when credentials published at st.LastRotated fall due under
// policy.
func Next(st *osbv1alpha1.RotationStatus, policy *osbv1alpha1.CredentialRotation) time.Time {
	if st.LastRotated == nil {
		return time.Time{}
	}
	return st.LastRotated.Add(policy.Every.Duration)
}

// Expiry is what OSB's binding metadata says of credentials published at
// at under policy: renew them before the next rotation; they expire once
// its overlap has ended.
func Expiry(policy *osbv1alpha1.CredentialRotation, at time.Time) *osbv1alpha1.BindingMetadata {
	renew := at.Add(policy.Every.Duration).UTC()
	return &osbv1alpha1.BindingMetadata{
		RenewBefore: renew.Format(time.RFC3339),
		ExpiresAt:   renew.Add(policy.KeepFor.Duration).Format(time.RFC3339),
	}
}

// Published is b's rotation status once generation gen, held by
// successor, is published at now under policy (nil: the plan's default
// went; nothing more is scheduled): the predecessor retires once keepFor
// has passed, and a forced rotation is honoured.
func Published(b *osbv1alpha1.SFServiceBinding, policy *osbv1alpha1.CredentialRotation, gen int64, successor string, now time.Time) *osbv1alpha1.RotationStatus {
	st := &osbv1alpha1.RotationStatus{}
	if b.Status.Rotation != nil {
		st = b.Status.Rotation.DeepCopy()
	}
	if st.Current != "" && st.Current != successor {
		keep := time.Duration(0)
		if policy != nil {
			keep = policy.KeepFor.Duration
		}
		st.Retiring = append(st.Retiring, osbv1alpha1.RetiringCredentials{Binding: st.Current, Until: metav1.NewTime(now.Add(keep))})
	}
	st.Generation, st.Current = gen, successor
	st.LastRotated = &metav1.Time{Time: now}
	st.NextRotation = nil
	if policy != nil {
		st.NextRotation = &metav1.Time{Time: now.Add(policy.Every.Duration)}
	}
	if v := b.Annotations[osbv1alpha1.RotateAnnotation]; v != "" {
		st.Forced = v
	}
	return st
}

// Retired is st without the successor name among its retiring ones.
func Retired(st *osbv1alpha1.RotationStatus, name string) *osbv1alpha1.RotationStatus {
	out := st.DeepCopy()
	out.Retiring = slices.DeleteFunc(out.Retiring, func(r osbv1alpha1.RetiringCredentials) bool { return r.Binding == name })
	return out
}
