package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/parameters"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/rotation"
	"github.com/quartermaster/qm/internal/tenancy"
)

// Offerings finds the plan and service an instance of a namespace names:
// the catalog's, or else its own namespace's (tenancy.Served).
type Offerings interface {
	PlanFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFPlan, error)
	ServiceFor(ctx context.Context, id, namespace string) (*osbv1alpha1.SFService, error)
}

// Operations holds the activities of the provision, update, deprovision,
// bind and unbind workflows. Each is idempotent: it reads what it needs from
// the API server and writes with server-side apply, create-or-get or a
// status patch, so a retry after a crash at any point converges.
type Operations struct {
	// Client reads and writes the API server directly (no cache), so that
	// an operation never acts on a stale instance.
	Client    client.Client
	Offerings Offerings
	// Templates fetches the templates that name a url (nil: any host, the
	// default bounds).
	Templates *plan.Fetcher
	// Bounds limit each render of a template (zero: plan.DefaultBounds).
	Bounds plan.Bounds
	// Renderer renders in processes of their own (nil: in this one).
	Renderer plan.Runner
	// Clusters reaches the clusters instances are scheduled on (nil: only
	// the one Client reaches).
	Clusters *clusters.Clients
	// Schedules says that a scheduler chooses the cluster of a new
	// instance (Scheduling.Schedule), as any but the default one does.
	Schedules bool
	// Events tells a plan's author, on the instance or binding, of output
	// that was ignored but is likely a mistake (nil: nobody).
	Events record.EventRecorder
	// Catalog is the trust boundary: a plan outside it is a tenant's
	// (tenancy), applied as a ServiceAccount of its namespace and only
	// into its instance's namespace.
	Catalog tenancy.Boundary

	runs   runCache
	params parameters.Checker
}

// templateAction is the template an operation applies, if any: an update
// renders the provision template again; deprovision has none.
var templateAction = map[lifecycle.Operation]osbv1alpha1.TemplateAction{
	lifecycle.OpProvision: osbv1alpha1.ActionProvision, lifecycle.OpUpdate: osbv1alpha1.ActionProvision,
	lifecycle.OpBind: osbv1alpha1.ActionBind, lifecycle.OpUnbind: osbv1alpha1.ActionUnbind,
}

// Begin tells the workflow the generation it works on and how long it may
// poll, and marks a removal in progress.
func (a *Operations) Begin(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) (Begun, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return Begun{}, err
	}
	if t.done(op) {
		return Begun{Done: true, Generation: t.carriedOut()}, nil
	}
	if !op.Removes() && t.object().GetDeletionTimestamp() != nil {
		// Deleted since the request: its removal follows, and nothing is
		// applied before it. The deletion raised the generation, so an
		// update begun now would apply a generation nobody asked for. What
		// the status says was carried out last is what the run found done:
		// a replay of a run whose first task applied it, and whose
		// completion was lost, before the deletion (the removal's run, under
		// the same workflow ID, cannot have begun yet).
		return Begun{Done: true, Generation: t.carriedOut()}, nil
	}
	if err := a.checkParameters(t, op); err != nil {
		return Begun{}, err
	}
	if op == lifecycle.OpProvision || (op == lifecycle.OpUpdate && t.movesPlan()) {
		if err := a.checkPlanLimit(ctx, t); err != nil {
			return Begun{}, err
		}
	}
	if op == lifecycle.OpBind && t.rotates() {
		if err := a.checkRotation(ctx, t); err != nil {
			return Begun{}, err
		}
	}
	if op == lifecycle.OpBind {
		var refusal *rotation.Refusal
		if err := rotation.CheckPolicy(t.plan, t.binding); errors.As(err, &refusal) {
			return Begun{}, temporal.NewNonRetryableApplicationError(refusal.Error(), ErrRotation, nil)
		}
	}
	if op == lifecycle.OpBind && (t.instance.Status.AppliedSpec == nil || t.instance.DeletionTimestamp != nil) {
		// Retried until the instance is provisioned, or the bind fails;
		// each retry reads the instance again, not the run's copy.
		a.forget(ctx, tg)
		return Begun{}, fmt.Errorf("instance %s/%s is not provisioned (state %q)", t.Namespace, t.instance.Name, t.instance.Status.State)
	}
	// A removal shows at once that it runs. Provision, update and bind
	// write "in progress" with what they applied (RecordResources), and only
	// if they have to wait: most finish in their first step, and one status
	// write fewer per operation is a fifth of their API server work.
	if op.Removes() {
		if err := a.patchStatus(ctx, t, inProgress(op)); err != nil {
			return Begun{}, err
		}
	}
	b := Begun{Generation: t.object().GetGeneration(), MaxPolling: DefaultMaxPolling,
		Service: t.plan.Spec.ServiceID, Plan: t.plan.Spec.ID}
	b.Schedule = op == lifecycle.OpProvision && a.Schedules && t.instance.Spec.ClusterID == ""
	if op == lifecycle.OpUnbind {
		b.NoUnbindTemplate = (&plan.Subject{Plan: t.plan}).Template(osbv1alpha1.ActionUnbind) == nil
	}
	if t.binding != nil && rotation.Front(t.plan, t.binding) {
		b.Rotates = true
		if r := t.binding.Status.Rotation; r != nil {
			b.RotationGeneration = r.Generation
		}
	}
	if p := t.plan.Spec.MaximumPollingDuration; p != nil {
		b.MaxPolling = time.Duration(*p) * time.Second
	}
	return b, nil
}

// ApplyTemplates renders the operation's template (provision for provision
// and update, bind, unbind) and applies the objects, owned by the target's
// registry. An update prunes what the plan no longer renders. Deprovision
// has no template. It returns the refs of what is applied now, which the
// workflow records in the status (RecordResources, Finish).
func (a *Operations) ApplyTemplates(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) ([]osbv1alpha1.Source, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return nil, err
	}
	action, ok := templateAction[op]
	if !ok {
		return t.resources(), nil
	}
	if err := t.ensureNamespace(ctx, op); err != nil {
		return nil, err
	}
	secret, objs, check, err := a.render(ctx, t, op, action)
	if err != nil {
		return nil, err
	}
	owner := apply.Owner{Name: secret.Name, Namespace: secret.Namespace, UID: secret.UID}
	fence := apply.Fence{Generation: t.object().GetGeneration(), PlanGeneration: t.plan.Generation}
	var opts []apply.Option
	if check != nil {
		opts = append(opts, apply.After(check))
	}
	if op != lifecycle.OpUnbind {
		// What the status does not list was never applied: created without
		// a read. (An unbind's template edits what the bind made.)
		opts = append(opts, apply.Existing(t.resources()))
	}
	var answers []*unstructured.Unstructured
	opts = append(opts, apply.Answers(&answers))
	refs, err := apply.Objects(ctx, t.applier, owner, fence, tg.Namespace, objs, opts...)
	if err != nil {
		return nil, classifyApply(ctx, tg, err)
	}
	if err := a.recordApplied(ctx, t, op, secret, objs); err != nil {
		return nil, err
	}
	// Finish records the plan generation rendered here; the run's cache
	// carries it (without it, after a worker restart, nothing is recorded
	// and a mass update renders the instance again, which is harmless).
	t.renderedPlan = t.plan.Generation
	t.registrySecret = secret
	t.written = written(refs, answers)
	a.remember(ctx, t)
	switch op {
	case lifecycle.OpUnbind:
		// The unbind template edits shared objects (e.g. removes a user);
		// it creates nothing that the binding owns afterwards.
		return t.resources(), nil
	case lifecycle.OpUpdate:
		left, err := apply.Prune(ctx, t.applier, owner, fence, t.resources(), refs)
		if err != nil {
			return nil, classifyApply(ctx, tg, err)
		}
		a.reportLeft(t, left)
	}
	return refs, nil
}

// Observe checks where the operation stands, in three parts: it reads
// what the status template sees and renders it (readStatus), decides what
// that means (plan's Status.Decide, pure), and writes what follows
// (recordObservation: a bind's credentials, the instance's metadata, the
// progress shown). Only that last part writes: the registry is read as
// stored, and created only if the observation stores credentials in it.
// Without a status for the operation, applying is success, and a removal
// succeeds once every applied object is gone (defaultOutcome). It is one
// step because a bind's credentials, which the status template renders,
// must never travel through Temporal to another.
func (a *Operations) Observe(ctx context.Context, tg lifecycle.Target, op lifecycle.Operation) (Outcome, error) {
	t, err := a.load(ctx, tg, op)
	if err != nil {
		return Outcome{}, err
	}
	read, err := a.readStatus(ctx, t, op)
	if err != nil {
		return Outcome{}, err
	}
	if read.status == nil {
		return a.defaultOutcome(ctx, t, op)
	}
	saved, _ := read.subject.Registry.Get(registry.KeyDashboardURL)
	obs, err := read.status.Decide(op, stringOf(saved))
	if err != nil {
		return Outcome{}, classify(err)
	}
	if err := a.recordObservation(ctx, t, op, read.subject.Registry, read.secret, obs); err != nil {
		return Outcome{}, err
	}
	return Outcome{State: obs.State, Description: obs.Description, Error: obs.Error, DashboardURL: obs.DashboardURL,
		InstanceUsable: obs.InstanceUsable, UpdateRepeatable: obs.UpdateRepeatable, Warnings: read.warnings}, nil
}

// statusRead is what readStatus found: the status of the operation (nil
// when the plan has none for it), what it was rendered for, and what the
// plan's author should hear of its sources.
type statusRead struct {
	status   *plan.Status
	subject  *plan.Subject
	secret   *corev1.Secret
	warnings []string
}

// readStatus renders the target's status template with what it sees (the
// registry, the sources). It writes nothing but the warnings' Events.
func (a *Operations) readStatus(ctx context.Context, t *target, op lifecycle.Operation) (statusRead, error) {
	if !(&plan.Subject{Plan: t.plan}).HasStatus() {
		return statusRead{}, nil
	}
	subject, regSecret, err := a.observedSubject(ctx, t)
	if err != nil {
		return statusRead{}, err
	}
	values, warnings, err := a.values(ctx, t, subject, true)
	if err != nil {
		return statusRead{}, err
	}
	st, err := subject.Status(string(op), values)
	if err != nil {
		return statusRead{}, classify(err)
	}
	return statusRead{status: st, subject: subject, secret: regSecret, warnings: warnings}, nil
}

// recordObservation writes what an observation calls for: a bind's
// credentials into the binding's Secret, the instance's OSB metadata, and
// the description of an operation under way into the status.
func (a *Operations) recordObservation(ctx context.Context, t *target, op lifecycle.Operation, reg *registry.Registry, regSecret *corev1.Secret, obs plan.Observation) error {
	if obs.Credentials != nil {
		if err := a.storeCredentials(ctx, t, reg, regSecret, obs.Credentials); err != nil {
			return err
		}
	}
	if err := a.recordMetadata(ctx, t, op, obs.Metadata); err != nil {
		return err
	}
	if obs.Progress != "" {
		return a.showProgress(ctx, t, obs.Progress)
	}
	return nil
}

// stringOf is a registry value as text, "" for none.
func stringOf(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// defaultOutcome is the outcome of an operation its plan has no status for:
// applying succeeds at once, and a removal once every object is gone.
func (a *Operations) defaultOutcome(ctx context.Context, t *target, op lifecycle.Operation) (Outcome, error) {
	if !op.Removes() {
		if op == lifecycle.OpBind {
			subject, regSecret, err := a.observedSubject(ctx, t)
			if err != nil {
				return Outcome{}, err
			}
			if err := a.storeCredentials(ctx, t, subject.Registry, regSecret, nil); err != nil {
				return Outcome{}, err
			}
		}
		return Outcome{State: osbv1alpha1.StateSucceeded}, nil
	}
	return a.removalOutcome(ctx, t)
}

// showProgress puts what the status template says of an operation under
// way into the status, so that kubectl and last_operation show it, and
// writes only when it changed. Until RecordResources has marked the
// operation in progress, it is kept for that write.
func (a *Operations) showProgress(ctx context.Context, t *target, description string) error {
	state, _, current := t.status()
	switch {
	case state != osbv1alpha1.StateInProgress:
		t.observed = description
		a.remember(ctx, t)
		return nil
	case current == description:
		return nil
	default:
		return a.patchStatus(ctx, t, func(s *status) { s.Description = description })
	}
}

// subject returns what the target's templates are rendered for, with its
// registry (created on first use), and the registry's Secret.
func (a *Operations) subject(ctx context.Context, t *target) (*plan.Subject, *corev1.Secret, error) {
	reg, secret, err := a.registry(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	return a.subjectWith(ctx, t, reg, secret)
}

// observedSubject is subject for an observation, which writes nothing
// until it has decided: the registry as stored (readRegistry), and no
// Secret when there is none yet.
func (a *Operations) observedSubject(ctx context.Context, t *target) (*plan.Subject, *corev1.Secret, error) {
	reg, secret, err := a.readRegistry(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	return a.subjectWith(ctx, t, reg, secret)
}

// subjectWith is what the target's templates are rendered for, with reg.
func (a *Operations) subjectWith(ctx context.Context, t *target, reg *registry.Registry, secret *corev1.Secret) (*plan.Subject, *corev1.Secret, error) {
	var err error
	subject := &plan.Subject{Service: t.service, Plan: t.plan, Instance: t.instance, Binding: t.binding, Registry: reg, Fetcher: a.Templates, Bounds: a.Bounds, Runner: a.Renderer,
		Cluster: t.sfCluster()}
	if t.rotates() {
		if subject.Predecessor, err = a.predecessor(ctx, t); err != nil {
			return nil, nil, err
		}
	}
	return subject, secret, nil
}
