package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/quartermaster/qm/internal/apply"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/metrics"
	"github.com/quartermaster/qm/internal/plan"
)

// Error types that retrying cannot fix. Activities fail with them as
// non-retryable application errors; the workflow turns them into a failed
// state whose description is the error message.
const (
	ErrTemplate = "TemplateError"
	ErrPlan     = "PlanError"
	ErrApply    = "ApplyError"
	// ErrParameters is parameters that do not match the plan's schema.
	ErrParameters = "ParametersError"
	// ErrRotation is a binding that may not rotate the predecessor it
	// names (rotation.Check): made with kubectl, since the API refuses it
	// with 400.
	ErrRotation = "RotationError"
	ErrGone     = "TargetGone"
	// ErrLimit is a provision beyond the plan's maxInstances
	// (internal/limits): made with kubectl, since the API refuses it with
	// 403.
	ErrLimit = "LimitReached"
	// ErrSuperseded is an apply that a newer generation's apply overtook
	// (apply.Fence); only a stale worker meets it.
	ErrSuperseded = "Superseded"
)

// errGone marks a target deleted while its operation ran.
var errGone = errors.New("gone")

// Permanent is the one rule for which errors retrying cannot fix: a
// non-retryable application error, as the activities return for the types
// above (and a workflow for its own, such as retries run out). It returns
// the error's type, which the workflow writes as the failure's kind.
// Temporal itself never retries such an error, so no retry policy lists
// the types again.
func Permanent(err error) (kind string, ok bool) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		return appErr.Type(), true
	}
	return "", false
}

// classify makes the errors of package plan and of the API server that the
// same call would meet again non-retryable: a template that does not
// render, and an object the API server refuses. Everything else (a chart
// that could not be fetched, a timeout) is retried.
func classify(err error) error {
	var te *plan.TemplateError
	var superseded *apply.Superseded
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTemplate, nil)
	case errors.As(err, &superseded):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrSuperseded, nil)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || meta.IsNoMatchError(err) || apierrors.IsForbidden(err):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrApply, nil)
	default:
		return err
	}
}

// classifyApply is classify for the error of an apply or a prune, which
// also says when the fence refused it: the refusal is what keeps a stale
// worker's writes out, and an operator (or a test) sees that it happened
// rather than that the worker simply went quiet.
func classifyApply(ctx context.Context, tg lifecycle.Target, err error) error {
	var superseded *apply.Superseded
	if errors.As(err, &superseded) {
		activity.GetLogger(ctx).Warn("the fence refused a stale apply: a newer generation's apply overtook it, and nothing of it is written",
			"kind", string(tg.Kind), "namespace", tg.Namespace, "name", tg.Name, "object", superseded.Object,
			"applied", superseded.Applied.String(), "rendered", superseded.Rendered.String())
		metrics.ApplySuperseded(string(tg.Kind))
	}
	return classify(err)
}

// scopeError is a tenant's plan that rendered an object outside its
// instance's namespace (tenancy.CheckScope): nothing was written, and no
// retry renders anything else.
func scopeError(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrApply, nil)
}

// unknownPlan is the error of an instance or binding whose plan no SFPlan
// registers.
func unknownPlan(id string) error {
	return planError("unknown plan %q: no SFPlan has this spec.id", id)
}

// planError is a plan or service that is not registered.
func planError(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrPlan, nil)
}

// gone turns a NotFound of the target into a non-retryable ErrGone: the
// resource was deleted while its operation ran, and there is nothing left
// to do.
func gone(err error, tg lifecycle.Target) error {
	if apierrors.IsNotFound(err) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s %s/%s no longer exists", tg.Kind, tg.Namespace, tg.Name), ErrGone, errGone)
	}
	return err
}
