package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
)

// measured is an operation whose start and end the worker's metrics count.
// Neither is counted while a run replays: the run that first reached the
// point counted it, and a replay on another worker must not count again.
// The metrics are no command, so adding or moving them changes no history.
type measured struct {
	ctx   workflow.Context
	op    metrics.Operation
	start time.Time
}

// kindNotWritten is the failure kind of a run that could not write its
// operation's outcome (its error is no ApplicationError of a known kind).
const kindNotWritten = "OutcomeNotWritten"

// measure counts op as started; its duration runs from the run's start,
// which is when the request arrived.
func measure(ctx workflow.Context, op lifecycle.Operation, begun activities.Begun) measured {
	m := measured{ctx: ctx, op: metrics.Operation{Operation: string(op), Service: begun.Service, Plan: begun.Plan},
		start: workflow.GetInfo(ctx).WorkflowStartTime}
	if !workflow.IsReplaying(ctx) {
		metrics.OperationStarted(m.op)
	}
	return m
}

// end counts the operation's end by what its run returns, and returns it.
func (m measured) end(res Result, err error) (Result, error) {
	if !workflow.IsReplaying(m.ctx) {
		metrics.OperationEnded(m.op, failureKind(err), workflow.Now(m.ctx).Sub(m.start))
	}
	return res, err
}

// failureKind is the kind a run's error fails it with: the type finish
// gives its ApplicationError (empty: the run succeeded).
func failureKind(err error) string {
	if err == nil {
		return ""
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() != "" {
		return appErr.Type()
	}
	return kindNotWritten
}
