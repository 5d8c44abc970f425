package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/workflows/runs"
)

// Result is what a run returns when its operation succeeded: the state
// and description it wrote, the generation of the resource it worked on,
// and what it applied. The generation tells an operator which spec a run
// applied: a run that began again after a lost worker reads the spec anew.
type Result struct {
	State       osbv1alpha1.OperationState `json:"state"`
	Description string                     `json:"description,omitempty"`
	Generation  int64                      `json:"generation,omitempty"`
	// FoundDone is the generation a run found carried out already when it
	// began (Generation is then 0): most often by its own first workflow
	// task, which applied it and wrote the status, and whose completion
	// was lost with its worker. A run that did nothing for another reason
	// (its resource deleted or gone) leaves it 0.
	FoundDone int64                `json:"foundDone,omitempty"`
	Resources []osbv1alpha1.Source `json:"resources,omitempty"`
	// Warnings are what the plan's author should hear of its output (the
	// same as the Warning Events on the resource).
	Warnings []string `json:"warnings,omitempty"`
}

// The kinds of failure a run ends with, besides the activities' error types
// (TemplateError, PlanError, ApplyError, ParametersError): its failure's
// type, for the Temporal UI and `temporal workflow list`.
const (
	// KindStatusFailed: the plan's status template reported failed.
	KindStatusFailed = "StatusFailed"
	// KindTimeout: the plan's maximum_polling_duration passed first.
	KindTimeout = metrics.KindTimeout
	// KindRetriesExhausted: a step kept failing with errors that looked
	// transient (the API server unreachable, say) until its retries ran out.
	KindRetriesExhausted = "RetriesExhausted"
)

// Polling of the status template: the first check runs right after apply,
// then waits grow from pollFirst to pollMax.
const (
	pollFirst = time.Second
	pollMax   = 30 * time.Second
)

// Provision creates an instance: it renders the plan's provision template,
// applies the objects and waits until the status template says provision
// succeeded or failed.
func Provision(ctx workflow.Context, t lifecycle.Target) (Result, error) {
	return create(ctx, t, lifecycle.OpProvision)
}

// Update renders the provision template again for a changed instance,
// applies it, prunes what it no longer renders, and waits for the update
// status.
func Update(ctx workflow.Context, t lifecycle.Target) (Result, error) {
	return create(ctx, t, lifecycle.OpUpdate)
}

// Bind creates a binding: it renders the bind template, applies it, waits
// for the bind status and stores the credentials it reports.
func Bind(ctx workflow.Context, t lifecycle.Target) (Result, error) {
	return create(ctx, t, lifecycle.OpBind)
}

// Deprovision removes an instance: it unbinds the instance's bindings
// first, each by its own Unbind run, deletes what the instance applied,
// waits for the deprovision status, then deletes the registry and releases
// the finalizer so that Kubernetes lets the instance go.
func Deprovision(ctx workflow.Context, t lifecycle.Target) (Result, error) {
	return remove(ctx, t, lifecycle.OpDeprovision)
}

// Unbind removes a binding: it applies the unbind template, deletes what
// the binding applied, waits for the unbind status, then deletes the
// credentials and registry and releases the finalizer.
func Unbind(ctx workflow.Context, t lifecycle.Target) (Result, error) {
	return remove(ctx, t, lifecycle.OpUnbind)
}

func create(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation) (Result, error) {
	ctx = withPatientRetries(ctx)
	var a *activities.Operations

	begun, goOn, res, err := begin(ctx, t, op)
	if !goOn {
		return res, err
	}
	m := measure(ctx, op, begun)
	s := newSteps(ctx, t, op, begun.MaxPolling)
	if begun.Rotates {
		// A rotating binding publishes a successor's credentials, and
		// applies nothing of its own.
		return m.end(finish(ctx, t, op, begun.Generation, firstCredentials(ctx, s, begun), nil))
	}
	if begun.Schedule {
		gen, o, ok := schedule(ctx, s, begun)
		if !ok {
			return m.end(finish(ctx, t, op, begun.Generation, o, nil))
		}
		begun.Generation = gen
	}
	var refs []osbv1alpha1.Source
	if err := s.run(ctx, "apply", func(ctx workflow.Context) workflow.Future {
		return workflow.ExecuteLocalActivity(ctx, a.ApplyTemplates, t, op)
	}, &refs); err != nil {
		return m.end(finish(ctx, t, op, begun.Generation, failed(op, err), nil))
	}
	return m.end(finish(ctx, t, op, begun.Generation, poll(ctx, s, begun.MaxPolling, refs), refs))
}

func remove(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation) (Result, error) {
	ctx = withPatientRetries(ctx)
	var a *activities.Operations

	begun, goOn, res, err := begin(ctx, t, op)
	if !goOn {
		return res, err
	}
	m := measure(ctx, op, begun)
	s := newSteps(ctx, t, op, begun.MaxPolling)
	if begun.Rotates {
		o := waitForSuccessors(ctx, s, begun.MaxPolling)
		return m.end(finish(ctx, t, op, begun.Generation, o, nil))
	}
	// Unbinding an instance's bindings first came later: runs that began
	// before it keep their old path.
	if op == lifecycle.OpDeprovision && workflow.GetVersion(ctx, unbindFirst, workflow.DefaultVersion, 1) == 1 {
		if o, gone := waitForBindings(ctx, s, begun.MaxPolling); !gone {
			return m.end(finish(ctx, t, op, begun.Generation, o, nil))
		}
	}
	// Deprovision has no template to apply, nor an unbind whose plan has
	// none; runs begun before operatorView called the step anyway.
	if (op == lifecycle.OpUnbind && !begun.NoUnbindTemplate) || !s.visible {
		if err := s.run(ctx, "apply", func(ctx workflow.Context) workflow.Future {
			return workflow.ExecuteLocalActivity(ctx, a.ApplyTemplates, t, op)
		}, nil); err != nil {
			return m.end(finish(ctx, t, op, begun.Generation, failed(op, err), nil))
		}
	}
	if err := s.run(ctx, "delete what it applied", func(ctx workflow.Context) workflow.Future {
		return workflow.ExecuteLocalActivity(ctx, a.RemoveResources, t, op)
	}, nil); err != nil {
		return m.end(finish(ctx, t, op, begun.Generation, failed(op, err), nil))
	}
	return m.end(finish(ctx, t, op, begun.Generation, poll(ctx, s, begun.MaxPolling, nil), nil))
}

// unbindFirst is the change that has Deprovision unbind the instance's
// bindings before it removes the instance.
const unbindFirst = "unbind-bindings-first"

// waitForBindings waits on durable timers until the instance's users are
// gone: by default (a kubectl delete) until its users remove its bindings,
// usages and claims themselves, as condition InUse names them; with the
// annotation quartermaster.io/deprovision-in-use (the OSB API's deprovision)
// it deletes the bindings, each then unbound by its own Unbind run
// (RemoveBindings decides). gone is false, with the failed outcome, when
// they are not gone within the plan's maximum polling duration.
func waitForBindings(ctx workflow.Context, s *steps, maxPolling time.Duration) (o activities.Outcome, gone bool) {
	var a *activities.Operations
	t := s.t
	polls := newBackoff(workflow.Now(ctx).Add(maxPolling), pollFirst, pollMax)
	for {
		var bindings int
		if err := workflow.ExecuteLocalActivity(ctx, a.RemoveBindings, t).Get(ctx, &bindings); err != nil {
			return failed(lifecycle.OpDeprovision, err), false
		}
		if bindings == 0 {
			return activities.Outcome{}, true
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting for %d bindings or other users of the instance to go (its status names them)", bindings))
		left := polls.left(ctx)
		if left <= 0 {
			return activities.Outcome{
				State: osbv1alpha1.StateFailed,
				Kind:  KindTimeout,
				Description: fmt.Sprintf("deprovision failed: %d of the instance's bindings or other users were still there after the plan's maximum_polling_duration of %s",
					bindings, maxPolling),
				InstanceUsable: ptr(true),
			}, false
		}
		if err := polls.sleep(ctx, s, left, "wait for the bindings to go"); err != nil {
			return failed(lifecycle.OpDeprovision, err), false
		}
	}
}

// begin runs the operation's first step. goOn is false when there is
// nothing (more) to do: the operation already ran for this generation, or
// it could not begin, and res and err are what the workflow returns.
func begin(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation) (begun activities.Begun, goOn bool, res Result, err error) {
	var a *activities.Operations
	if err := workflow.ExecuteLocalActivity(ctx, a.Begin, t, op).Get(ctx, &begun); err != nil {
		res, err := endEarly(ctx, t, op, err)
		return begun, false, res, err
	}
	if begun.Done {
		return begun, false, Result{FoundDone: begun.Generation}, nil
	}
	return begun, true, Result{}, nil
}

// poll evaluates the status template until it reports a terminal state or
// the plan's maximum polling duration has passed. Before the first wait it
// records what was applied (refs), so that a user sees it while waiting. The
// waits are durable timers: a worker restart resumes them.
func poll(ctx workflow.Context, s *steps, maxPolling time.Duration, refs []osbv1alpha1.Source) activities.Outcome {
	var a *activities.Operations
	t, op := s.t, s.op
	polls := newBackoff(workflow.Now(ctx).Add(maxPolling), pollFirst, pollMax)
	for first := true; ; first = false {
		var o activities.Outcome
		if err := s.run(ctx, "check the status", func(ctx workflow.Context) workflow.Future {
			return workflow.ExecuteLocalActivity(ctx, a.Observe, t, op)
		}, &o); err != nil {
			return failed(op, err)
		}
		if o.State.Terminal() {
			return o
		}
		// Shown in the UI while the run waits; not part of the history.
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting for the %s status: %s", op, describe(o))+warningLines(o.Warnings))
		if first && refs != nil {
			if err := workflow.ExecuteLocalActivity(ctx, a.RecordResources, t, op, refs).Get(ctx, nil); err != nil {
				return failed(op, err)
			}
		}
		left := polls.left(ctx)
		if left <= 0 {
			timedOut := activities.Outcome{
				State: osbv1alpha1.StateFailed,
				Kind:  KindTimeout,
				Description: fmt.Sprintf("%s did not finish within the plan's maximum_polling_duration of %s (last status: %s)",
					op, maxPolling, describe(o)),
			}
			if op == lifecycle.OpUpdate {
				timedOut.UpdateRepeatable = ptr(true) // it may finish on a second try
			}
			return timedOut
		}
		if err := polls.sleep(ctx, s, left, "poll the "+string(op)+" status"); err != nil {
			return failed(op, err)
		}
	}
}

func describe(o activities.Outcome) string {
	if o.Description != "" {
		return fmt.Sprintf("%s, %q", o.State, o.Description)
	}
	return string(o.State)
}

// finish writes the outcome and what was applied, and ends the run with it:
// a failed operation fails the run, with the description a user sees as
// its message and the failure's kind as its type; a successful one returns
// a Result. Writing the outcome is the one step whose failure fails the
// run for its own sake: without it, nobody would learn the outcome.
func finish(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation, generation int64, o activities.Outcome, refs []osbv1alpha1.Source) (Result, error) {
	var a *activities.Operations
	if op.Removes() && o.State == osbv1alpha1.StateFailed && o.Kind == activities.ErrGone {
		// The resource went: mostly by this run's own release, whose task
		// another worker replays because the one that released it died
		// before it could say so (or a user took the finalizer off). There
		// is nothing left to remove, nor a status to report on: the run
		// ends with nothing more to do, not as a failure.
		workflow.GetLogger(ctx).Info("the target is gone: its removal was done by this run's lost task", "operation", op)
		return Result{}, nil
	}
	if err := workflow.ExecuteLocalActivity(ctx, a.Finish, t, op, generation, o, refs).Get(ctx, nil); err != nil {
		return Result{}, fmt.Errorf("writing the %s outcome %q of %s %s/%s: %w", op, o.State, t.Kind, t.Namespace, t.Name, err)
	}
	// Runs begun before operatorView completed without a result, whatever
	// the outcome.
	if workflow.GetVersion(ctx, operatorView, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return Result{}, nil
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, runs.AttrState.ValueSet(string(o.State))); err != nil {
		return Result{}, fmt.Errorf("setting %s: %w", runs.AttrState.GetName(), err)
	}
	workflow.SetCurrentDetails(ctx, "")
	if o.State == osbv1alpha1.StateFailed {
		return Result{}, temporal.NewNonRetryableApplicationError(o.Description, cmp.Or(o.Kind, KindStatusFailed), nil)
	}
	return Result{State: o.State, Description: o.Description, Generation: generation, Resources: refs, Warnings: o.Warnings}, nil
}

// warningLines puts a plan's warnings under the run's details, a line each.
func warningLines(warnings []string) string {
	var b strings.Builder
	for _, w := range warnings {
		b.WriteString("\nwarning: " + w)
	}
	return b.String()
}

// endEarly handles a failed first step: a target deleted meanwhile ends the
// workflow quietly; anything else (an unknown plan) is written as failed.
func endEarly(ctx workflow.Context, t lifecycle.Target, op lifecycle.Operation, err error) (Result, error) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrGone {
		workflow.GetLogger(ctx).Info("target deleted before the operation began", "operation", op)
		return Result{}, nil
	}
	return measure(ctx, op, activities.Begun{}).end(finish(ctx, t, op, 0, failed(op, err), nil))
}

// failed turns an activity error into a failed outcome whose description is
// the error's own message (a template error with its line, an API server's
// refusal), without Temporal's wrapping. A failed update or deprovision
// leaves the instance usable (what ran before still runs); a failed update
// may be repeated unless the error is one that repeating cannot fix.
func failed(op lifecycle.Operation, err error) activities.Outcome {
	msg := message(err)
	kind := KindRetriesExhausted
	if k, ok := activities.Permanent(err); ok {
		kind = k
	}
	// Retries that ran out end the run, but what they met may pass.
	permanent := kind != KindRetriesExhausted
	o := activities.Outcome{State: osbv1alpha1.StateFailed, Description: fmt.Sprintf("%s failed: %s", op, msg), Error: msg, Kind: kind}
	if op == lifecycle.OpUpdate || op == lifecycle.OpDeprovision {
		o.InstanceUsable = ptr(true)
	}
	if op == lifecycle.OpUpdate {
		o.UpdateRepeatable = ptr(!permanent)
	}
	return o
}

func ptr[T any](v T) *T { return &v }

// Register registers every Quartermaster workflow, so that the worker and
// the replay test always know the same set. The lifecycle workflows are
// registered under runs.WorkflowType, the names the watcher starts them by.
//
// On a versioned worker (worker.Versioning), a run that ends soon (an
// operation, a self-check) is pinned to the build that started it, the
// worker's default. The runs that live as long as their resources (or, for
// a paused mass update, as long as an operator waits) move to the current
// build at their next task instead: pinned, they would hold every release
// they ever ran on. Those are the ones whose changes go behind
// workflow.GetVersion (ARCHITECTURE.md, "Worker Versioning").
func Register(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflow(SelfCheck)
	for name, wf := range map[string]any{
		runs.HealthChecksType:       HealthChecks,
		runs.ClaimType:              ServiceClaim,
		runs.AllocatorType:          ClaimAllocator,
		runs.BindingUsageType:       BindingUsage,
		runs.ServiceBindingType:     ServiceBinding,
		runs.MassUpdateType:         MassUpdate,
		runs.CredentialRotationType: CredentialRotation,
		runs.DriftChecksType:        DriftChecks,
	} {
		r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name, VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade})
	}
	// A repair ends soon, as an operation does: pinned, it drains on the
	// build that started it, and a release rolled back to never sees it.
	r.RegisterWorkflowWithOptions(Repair, workflow.RegisterOptions{Name: runs.RepairType})
	for op, wf := range map[lifecycle.Operation]any{
		lifecycle.OpProvision:   Provision,
		lifecycle.OpUpdate:      Update,
		lifecycle.OpDeprovision: Deprovision,
		lifecycle.OpBind:        Bind,
		lifecycle.OpUnbind:      Unbind,
	} {
		r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: runs.WorkflowType(op)})
	}
}
