package rotation_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/rotation"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func policy(every, keep time.Duration) *osbv1alpha1.CredentialRotation {
	return &osbv1alpha1.CredentialRotation{Every: metav1.Duration{Duration: every}, KeepFor: metav1.Duration{Duration: keep}}
}

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }

func TestPolicy(t *testing.T) {
	own, def := policy(time.Hour, time.Minute), policy(2*time.Hour, time.Minute)
	rotating := &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Name: "small", BindingRotatable: ptr.To(true), BindingRotation: def}}
	plain := &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Name: "plain"}}
	withOwn := &osbv1alpha1.SFServiceBinding{Spec: osbv1alpha1.SFServiceBindingSpec{Rotation: own}}
	successor := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{osbv1alpha1.RotationOfLabel: "uid"}}}
	for _, tc := range []struct {
		name    string
		plan    *osbv1alpha1.SFPlan
		binding *osbv1alpha1.SFServiceBinding
		want    *osbv1alpha1.CredentialRotation
		refusal string
	}{
		{name: "its own", plan: rotating, binding: withOwn, want: own},
		{name: "the plan's default", plan: rotating, binding: &osbv1alpha1.SFServiceBinding{}, want: def},
		{name: "neither", plan: plain, binding: &osbv1alpha1.SFServiceBinding{}},
		{name: "a successor never rotates", plan: rotating, binding: successor},
		{name: "its own on a plan that does not rotate", plan: plain, binding: withOwn, want: own,
			refusal: `plan "plain" does not rotate bindings (its bindingRotatable is not true): spec.rotation cannot be honoured`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rotation.Policy(tc.plan, tc.binding))
			err := rotation.CheckPolicy(tc.plan, tc.binding)
			if tc.refusal == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tc.refusal)
		})
	}
}

func TestDecide(t *testing.T) {
	p := policy(20*time.Second, 10*time.Second)
	binding := func(annotation string, st *osbv1alpha1.RotationStatus) *osbv1alpha1.SFServiceBinding {
		b := &osbv1alpha1.SFServiceBinding{Status: osbv1alpha1.SFServiceBindingStatus{Rotation: st}}
		if annotation != "" {
			b.Annotations = map[string]string{osbv1alpha1.RotateAnnotation: annotation}
		}
		return b
	}
	current := &osbv1alpha1.RotationStatus{Generation: 2, Current: "b-r2", LastRotated: at(0), Forced: "one",
		Retiring: []osbv1alpha1.RetiringCredentials{{Binding: "b-r1", Until: *at(10 * time.Second)}}}
	for _, tc := range []struct {
		name    string
		binding *osbv1alpha1.SFServiceBinding
		policy  *osbv1alpha1.CredentialRotation
		now     time.Duration
		want    rotation.Plan
	}{
		{name: "no credentials yet", binding: binding("", nil), policy: p, want: rotation.Plan{Rotate: true, Why: "first credentials"}},
		{name: "in the overlap: wake when it ends", binding: binding("", current), policy: p, now: 5 * time.Second,
			want: rotation.Plan{Wake: t0.Add(10 * time.Second)}},
		{name: "the overlap over: retire, wake for the next rotation", binding: binding("", current), policy: p, now: 10 * time.Second,
			want: rotation.Plan{Retire: []string{"b-r1"}, Wake: t0.Add(20 * time.Second)}},
		{name: "due", binding: binding("", current), policy: p, now: 20 * time.Second,
			want: rotation.Plan{Rotate: true, Why: "scheduled", Retire: []string{"b-r1"}}},
		{name: "the annotation honoured already", binding: binding("one", current), policy: p, now: 5 * time.Second,
			want: rotation.Plan{Wake: t0.Add(10 * time.Second)}},
		{name: "a new value of the annotation", binding: binding("two", current), policy: p, now: 5 * time.Second,
			want: rotation.Plan{Rotate: true, Why: "forced by the annotation quartermaster.io/rotate=two", Wake: t0.Add(10 * time.Second)}},
		{name: "the plan's default gone: the credentials stay", binding: binding("", current), now: time.Hour,
			want: rotation.Plan{Retire: []string{"b-r1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rotation.Decide(tc.binding, tc.policy, t0.Add(tc.now)))
		})
	}
}

func TestPublished(t *testing.T) {
	p := policy(20*time.Second, 10*time.Second)
	b := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{osbv1alpha1.RotateAnnotation: "two"}},
		Status: osbv1alpha1.SFServiceBindingStatus{Rotation: &osbv1alpha1.RotationStatus{Generation: 1, Current: "b-r1", LastRotated: at(0), Forced: "one"}}}

	st := rotation.Published(b, p, 2, "b-r2", t0.Add(time.Minute))
	assert.Equal(t, &osbv1alpha1.RotationStatus{Generation: 2, Current: "b-r2", LastRotated: at(time.Minute), NextRotation: at(time.Minute + 20*time.Second),
		Forced: "two", Retiring: []osbv1alpha1.RetiringCredentials{{Binding: "b-r1", Until: *at(time.Minute + 10*time.Second)}}}, st)

	again := b.DeepCopy()
	again.Status.Rotation = st
	assert.Equal(t, st, rotation.Published(again, p, 2, "b-r2", t0.Add(time.Minute)), "publishing the same generation again changes nothing")
	assert.Empty(t, rotation.Retired(st, "b-r1").Retiring)

	first := rotation.Published(&osbv1alpha1.SFServiceBinding{}, p, 1, "b-r1", t0)
	assert.Empty(t, first.Retiring, "the first credentials replace none")
}

func TestExpiry(t *testing.T) {
	assert.Equal(t, &osbv1alpha1.BindingMetadata{RenewBefore: "2026-11-27T12:00:20Z", ExpiresAt: "2026-11-27T12:00:30Z"},
		rotation.Expiry(policy(20*time.Second, 10*time.Second), t0))
}

func TestSuccessor(t *testing.T) {
	front := &osbv1alpha1.SFServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", UID: "u1"},
		Spec: osbv1alpha1.SFServiceBindingSpec{ID: "app-id", InstanceID: "db", ServiceID: "s", PlanID: "p", AppGUID: "g",
			Rotation: policy(time.Hour, time.Minute)}}
	s := rotation.Successor(front, 3, "app-r2")
	assert.Equal(t, "app-r3", s.Name)
	assert.Equal(t, osbv1alpha1.SFServiceBindingSpec{ID: "app-id-r3", InstanceID: "db", ServiceID: "s", PlanID: "p", AppGUID: "g",
		PredecessorBinding: "app-r2", AcceptsIncomplete: true}, s.Spec)
	assert.True(t, rotation.IsSuccessor(s))
	require.Len(t, s.OwnerReferences, 1)
	assert.Equal(t, "u1", string(s.OwnerReferences[0].UID))
	assert.Len(t, rotation.SuccessorName(string(make([]byte, 260)), 1), 64, "a name too long for Kubernetes is a digest")
}
