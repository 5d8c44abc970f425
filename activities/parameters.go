package activities

import (
	"encoding/json"
	"errors"

	"go.temporal.io/sdk/temporal"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/parameters"
)

// checkParameters holds an instance or binding created with kubectl to the
// plan's parameter schema, as the OSB API holds a request: a violation is
// a non-retryable ErrParameters, so the operation fails at once, naming the
// field, before anything is applied. An update is checked against the
// update schema only when it changes the parameters (an OSB update without
// parameters keeps the ones the instance was created with).
func (a *Operations) checkParameters(t *target, op lifecycle.Operation) error {
	var use parameters.Use
	var params *apiextensionsv1.JSON
	switch op {
	case lifecycle.OpProvision:
		use, params = parameters.InstanceCreate, t.instance.Spec.Parameters
	case lifecycle.OpUpdate:
		if applied := t.instance.Status.AppliedSpec; applied != nil && equality.Semantic.DeepEqual(applied.Parameters, t.instance.Spec.Parameters) {
			return nil
		}
		use, params = parameters.InstanceUpdate, t.instance.Spec.Parameters
	case lifecycle.OpBind:
		use, params = parameters.BindingCreate, t.binding.Spec.Parameters
	default:
		return nil
	}
	var raw json.RawMessage
	if params != nil {
		raw = params.Raw
	}
	err := a.params.Check(t.plan, use, raw)
	var v *parameters.Violation
	switch {
	case err == nil:
		return nil
	case errors.As(err, &v):
		return temporal.NewNonRetryableApplicationError(v.Message, ErrParameters, nil)
	default:
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrPlan, nil)
	}
}
