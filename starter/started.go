package starter

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// Reasons of the Started condition.
const (
	reasonEngineUnreachable = "EngineUnreachable"
	reasonStartRefused      = "StartRefused"
)

// notStarted records on the resource why its operation's run cannot start
// (the workflow engine is unreachable, or refused it): the condition
// Started=False, written when it changes, not on each retry, so that
// `kubectl get` and the OSB last_operation say why the request waits.
func (s *Starter) notStarted(ctx context.Context, obj ctrlclient.Object, op lifecycle.Operation, cause error) {
	reason, msg := reasonStartRefused, fmt.Sprintf("the workflow engine at %s refused to start the %s: %v", s.address(), op, cause)
	if unreachable(cause) {
		reason, msg = reasonEngineUnreachable, fmt.Sprintf("the workflow engine at %s is unreachable; the %s starts once it answers", s.address(), op)
	}
	s.setNotStarted(ctx, obj, reason, msg)
}

// engineBack removes a Started=False of the resource once the engine
// answers, before the run starts (the run's own status writes come after
// it): what waited no longer does, and `kubectl get` shows no reason.
func (s *Starter) engineBack(ctx context.Context, obj ctrlclient.Object) {
	conds := osbv1alpha1.ConditionsOf(obj)
	if conds == nil {
		return
	}
	c := meta.FindStatusCondition(*conds, lifecycle.ConditionStarted)
	if c == nil || c.Status != metav1.ConditionFalse {
		return
	}
	if _, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return
	}
	base := obj.DeepCopyObject().(ctrlclient.Object)
	meta.RemoveStatusCondition(conds, lifecycle.ConditionStarted)
	if err := s.Client.Status().Patch(ctx, obj, ctrlclient.MergeFrom(base)); err != nil {
		log.FromContext(ctx).Info("could not clear the Started condition", "error", err)
	}
}

func (s *Starter) setNotStarted(ctx context.Context, obj ctrlclient.Object, reason, msg string) {
	conds := osbv1alpha1.ConditionsOf(obj)
	if conds == nil {
		return
	}
	if c := meta.FindStatusCondition(*conds, lifecycle.ConditionStarted); c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && c.Message == msg {
		return
	}
	base := obj.DeepCopyObject().(ctrlclient.Object)
	meta.SetStatusCondition(conds, metav1.Condition{Type: lifecycle.ConditionStarted, Status: metav1.ConditionFalse, Reason: reason, Message: msg,
		ObservedGeneration: obj.GetGeneration()})
	if err := s.Client.Status().Patch(ctx, obj, ctrlclient.MergeFrom(base)); err != nil {
		// The next retry writes it again; the run's start is what matters.
		log.FromContext(ctx).Info("could not record the Started condition", "error", err)
	}
}

// unreachable tells a Temporal frontend that cannot be reached from one
// that answered with a refusal.
func unreachable(err error) bool {
	var unavailable *serviceerror.Unavailable
	if errors.As(err, &unavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(errors.Unwrap(err)) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return status.Code(err) == codes.Unavailable
}

func (s *Starter) address() string {
	if s.TemporalAddress == "" {
		return "its address"
	}
	return s.TemporalAddress
}

// adopt remembers a run of op already under way under id as if this
// watcher had started it: a watcher started after it (a restart, a new
// leader) would otherwise take the run's end, seen before its cache sees
// the outcome, for a request to start it again.
func (s *Starter) adopt(ctx context.Context, key, id string, op lifecycle.Operation) {
	d, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return
	}
	if info := d.GetWorkflowExecutionInfo(); info.GetType().GetName() == runs.WorkflowType(op) {
		s.memo().Add(key, info.GetExecution().GetRunId(), startedTTL)
	}
}
