package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
)

// The states of an OSB last_operation response.
const (
	osbInProgress = "in progress"
	osbSucceeded  = "succeeded"
	osbFailed     = "failed"
)

// retryAfter is the Retry-After, in seconds, of an operation in progress.
const retryAfter = 2

// lastOperation is the OSB last_operation response body.
type lastOperation struct {
	State            string `json:"state"`
	Description      string `json:"description,omitempty"`
	InstanceUsable   *bool  `json:"instance_usable,omitempty"`
	UpdateRepeatable *bool  `json:"update_repeatable,omitempty"`
}

// operationResponse is the body of a 202 Accepted.
type operationResponse struct {
	DashboardURL string                        `json:"dashboard_url,omitempty"`
	Metadata     *osbv1alpha1.InstanceMetadata `json:"metadata,omitempty"`
	Operation    string                        `json:"operation,omitempty"`
}

// instanceOperation names the OSB operation an instance's state is about:
// the lifecycle's current operation, with the generation for an update
// ("update-2"), so that a poll for an earlier update is told apart.
func instanceOperation(inst *osbv1alpha1.SFServiceInstance) string {
	op := lifecycle.Current(inst)
	if op == lifecycle.OpUpdate {
		return fmt.Sprintf("%s-%d", op, inst.Generation)
	}
	return string(op)
}

// instanceProgress is the last_operation of an instance. The status speaks
// for the current operation only once it has observed the current
// generation; until then, and while a deprovision runs, it is in progress.
func instanceProgress(inst *osbv1alpha1.SFServiceInstance) lastOperation {
	st := inst.Status
	if inst.DeletionTimestamp != nil {
		if st.State == osbv1alpha1.StateFailed && lifecycle.Failed(st.Conditions, lifecycle.OpDeprovision) {
			return lastOperation{State: osbFailed, Description: st.Description, InstanceUsable: st.InstanceUsable}
		}
		return lastOperation{State: osbInProgress, Description: "deprovision in progress"}
	}
	if st.State.Terminal() && st.ObservedGeneration >= inst.Generation {
		if st.State == osbv1alpha1.StateSucceeded {
			return lastOperation{State: osbSucceeded, Description: st.Description}
		}
		return lastOperation{State: osbFailed, Description: st.Description,
			InstanceUsable: st.InstanceUsable, UpdateRepeatable: st.UpdateRepeatable}
	}
	return lastOperation{State: osbInProgress, Description: inProgressDescription(instanceOperation(inst), st.State, st.Description, st.Conditions)}
}

// bindingOperation names the OSB operation a binding's state is about.
func bindingOperation(b *osbv1alpha1.SFServiceBinding) string {
	return string(lifecycle.CurrentBinding(b))
}

// bindingProgress is the last_operation of a binding.
func bindingProgress(b *osbv1alpha1.SFServiceBinding) lastOperation {
	st := b.Status
	if b.DeletionTimestamp != nil {
		if st.State == osbv1alpha1.StateFailed && lifecycle.Failed(st.Conditions, lifecycle.OpUnbind) {
			return lastOperation{State: osbFailed, Description: st.Description}
		}
		return lastOperation{State: osbInProgress, Description: "unbind in progress"}
	}
	if st.State.Terminal() && st.ObservedGeneration >= b.Generation {
		return lastOperation{State: string(st.State), Description: st.Description}
	}
	return lastOperation{State: osbInProgress, Description: inProgressDescription(string(lifecycle.OpBind), st.State, st.Description, st.Conditions)}
}

func inProgressDescription(op string, state osbv1alpha1.OperationState, description string, conds []metav1.Condition) string {
	if state == osbv1alpha1.StateInProgress && description != "" {
		return description
	}
	if c := meta.FindStatusCondition(conds, lifecycle.ConditionStarted); c != nil && c.Status == metav1.ConditionFalse {
		return op + " is queued: " + c.Message
	}
	return op + " is queued"
}

// writeLastOperation answers a last_operation poll; while the operation
// runs, Retry-After tells the platform when to ask again.
func writeLastOperation(w http.ResponseWriter, lo lastOperation) {
	if lo.State == osbInProgress {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeJSON(w, http.StatusOK, lo)
}

// checkOperation refuses a last_operation poll for an operation other than
// the resource's current one: its outcome is no longer known.
func checkOperation(asked, current, what string) *requestError {
	if asked == "" || asked == current {
		return nil
	}
	return badRequest("operation %q is not the last operation of %s (the last one is %q)", asked, what, current)
}

// settle returns the progress of the operation on obj. For a synchronous
// plan (isAsync false) it first waits, re-reading obj into place, until
// the operation ends, obj is gone, or timeout passes: waited reports that
// it saw the operation end, gone that obj was deleted meanwhile (a
// deprovision or unbind that succeeded).
func (s *Server) settle(ctx context.Context, obj client.Object, isAsync bool, timeout time.Duration, progress func() lastOperation) (lo lastOperation, waited, gone bool, err error) {
	lo = progress()
	if isAsync || lo.State != osbInProgress {
		return lo, false, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := client.ObjectKeyFromObject(obj)
	interval := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return lo, false, false, nil
		case <-time.After(interval):
		}
		interval = min(2*interval, 500*time.Millisecond)
		if err := s.Kube.Get(ctx, key, obj); apierrors.IsNotFound(err) {
			return lo, true, true, nil
		} else if err != nil {
			if ctx.Err() != nil {
				return lo, false, false, nil
			}
			return lo, false, false, fmt.Errorf("reading %s: %w", key, err)
		}
		if lo = progress(); lo.State != osbInProgress {
			return lo, true, false, nil
		}
	}
}

// toJSON keeps a raw JSON field of a request for the resource's spec; an
// absent or null field is nil.
func toJSON(raw json.RawMessage) *apiextensionsv1.JSON {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil
	}
	return &apiextensionsv1.JSON{Raw: append([]byte(nil), t...)}
}

// sameJSON compares two JSON values by meaning: key order and spacing do
// not matter, and an absent value equals an empty object.
func sameJSON(a, b *apiextensionsv1.JSON) bool {
	return reflect.DeepEqual(decodeAny(a), decodeAny(b))
}

func decodeAny(j *apiextensionsv1.JSON) any {
	if j == nil || len(j.Raw) == 0 {
		return map[string]any{}
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil || v == nil {
		return map[string]any{}
	}
	return v
}

// rawOf returns a stored JSON field for a response body.
func rawOf(j *apiextensionsv1.JSON) json.RawMessage {
	if j == nil || len(j.Raw) == 0 {
		return nil
	}
	return j.Raw
}
