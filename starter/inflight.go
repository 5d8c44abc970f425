package starter

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/workflows/runs"
)

// keepInFlight has the keeper start again the operations whose resource
// says they are under way and whose run Temporal does not have. The
// watcher starts an operation on a request, and "in progress" is none:
// after Temporal's state is lost, such an instance or binding would stay
// "in progress" for good. Only the running runs are listed (a kind keeps
// every run it ever ran), and a suspect's own description decides: a run
// that ended is done (endedCounts), as what it wrote, or failed to, is its
// outcome, not a loss.
func (s *Starter) keepInFlight(keep *Loops) {
	keep.add(runKind{name: loops.InstanceOperation, query: runningOf(lifecycle.KindInstance),
		endedCounts: true, wants: s.instancesInFlight, wake: byRequest(s.restartInstance)})
	keep.add(runKind{name: loops.BindingOperation, query: runningOf(lifecycle.KindBinding),
		endedCounts: true, wants: s.bindingsInFlight, wake: byRequest(s.restartBinding)})
}

// runningOf is the visibility query of the running operations on kind.
func runningOf(kind lifecycle.Kind) string {
	return fmt.Sprintf("%s = %q AND ExecutionStatus = 'Running'", runs.AttrKind.GetName(), kind)
}

func (s *Starter) instancesInFlight(ctx context.Context) ([]loops.Want, error) {
	var list osbv1alpha1.SFServiceInstanceList
	if err := s.Client.List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the instances: %w", err)
	}
	var out []loops.Want
	for i := range list.Items {
		if inst := &list.Items[i]; inst.Status.State == osbv1alpha1.StateInProgress {
			out = append(out, loops.Want{ID: runs.WorkflowID(lifecycle.InstanceTarget(inst)), Namespace: inst.Namespace, Name: inst.Name})
		}
	}
	return out, nil
}

func (s *Starter) bindingsInFlight(ctx context.Context) ([]loops.Want, error) {
	var list osbv1alpha1.SFServiceBindingList
	if err := s.Client.List(ctx, &list, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the bindings: %w", err)
	}
	var out []loops.Want
	for i := range list.Items {
		if b := &list.Items[i]; b.Status.State == osbv1alpha1.StateInProgress {
			out = append(out, loops.Want{ID: runs.WorkflowID(lifecycle.BindingTarget(b)), Namespace: b.Namespace, Name: b.Name})
		}
	}
	return out, nil
}

// restartInstance starts again the operation an instance's status speaks
// of, forgetting that it was started: its run is gone.
func (s *Starter) restartInstance(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var inst osbv1alpha1.SFServiceInstance
	if err := s.Client.Get(ctx, req.NamespacedName, &inst); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if inst.Status.State != osbv1alpha1.StateInProgress {
		return ctrl.Result{}, nil
	}
	op := lifecycle.Current(&inst)
	s.memo().Remove(startedKey(&inst, op))
	return s.startInstance(ctx, &inst, op)
}

// restartBinding is restartInstance for a binding.
func (s *Starter) restartBinding(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b osbv1alpha1.SFServiceBinding
	if err := s.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if b.Status.State != osbv1alpha1.StateInProgress {
		return ctrl.Result{}, nil
	}
	op := lifecycle.CurrentBinding(&b)
	s.memo().Remove(startedKey(&b, op))
	return s.startBinding(ctx, &b, op)
}
