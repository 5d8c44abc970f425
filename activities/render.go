package activities

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/tenancy"
)

// render renders the target's template for action, checks that a
// tenant's plan rendered nothing outside its namespace, and stores the
// registry as the render left it. All before anything is applied: a
// refused render leaves nothing half-applied, and a retry renders the same
// generated passwords into the same objects.
//
// A target that never applied anything gets its registry in one write,
// created with what the render stored in it, rather than created empty
// and then saved: each write is a round trip to the API server, which
// under load is most of a provision's time. If an earlier attempt created
// the registry after all, the templates are rendered again with what that
// attempt stored.
//
// A registry created here is checked against the resource (stillThere) by
// the returned check, which the apply runs beside its first reads and
// waits for before its first write (apply.After); otherwise check is nil.
func (a *Operations) render(ctx context.Context, t *target, op lifecycle.Operation, action osbv1alpha1.TemplateAction) (secret *corev1.Secret, objs []*unstructured.Unstructured, check func() error, err error) {
	creating := t.fresh()
	var subject *plan.Subject
	if creating {
		var reg *registry.Registry
		if reg, err = a.newRegistry(ctx, t, a.registry); err == nil {
			subject, _, err = a.subjectWith(ctx, t, reg, nil)
		}
	} else {
		subject, secret, err = a.subject(ctx, t)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	values, _, err := a.values(ctx, t, subject, op.Removes() || op == lifecycle.OpBind)
	if err != nil {
		return nil, nil, nil, err
	}
	objs, err = subject.Objects(action, values)
	if err != nil {
		return nil, nil, nil, classify(err)
	}
	if a.tenant(t) {
		if err := tenancy.CheckScope(t.Namespace, objs, func(o *unstructured.Unstructured) (bool, error) {
			return t.applier.IsObjectNamespaced(o)
		}); err != nil {
			return nil, nil, nil, scopeError(err)
		}
	}
	if !creating {
		return secret, objs, nil, registry.Store{Client: t.kube}.Save(ctx, secret, subject.Registry)
	}
	_, secret, err = a.createRegistry(ctx, t, subject.Registry)
	if apierrors.IsAlreadyExists(err) {
		t.applied = true
		return a.render(ctx, t, op, action)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return secret, objs, func() error { return a.stillThere(ctx, t, secret) }, nil
}
