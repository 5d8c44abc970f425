package starter

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/fairness"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/loops"
	"github.com/quartermaster/qm/internal/rotation"
	"github.com/quartermaster/qm/workflows/runs"
)

// CredentialRotations keeps the rotation workflow of each rotating binding
// once its Bind has published its first credentials, and signals it when
// there is something to look at again: a changed spec (the policy), a new
// value of the force annotation, the binding's deletion. Its own status
// writes wake nothing: the workflow wrote them.
type CredentialRotations struct {
	Client   ctrlclient.Client
	Temporal client.Client

	mu       sync.Mutex
	signaled map[string]string // by binding namespace/name: what was signalled last
}

// setupCredentialRotations registers the reconciler, and has keep start
// again a rotation that Temporal lost.
func setupCredentialRotations(mgr ctrl.Manager, tc client.Client, copts reconcilerOptions, keep *Loops) error {
	r := &CredentialRotations{Client: mgr.GetClient(), Temporal: tc, signaled: map[string]string{}}
	keep.add(runKind{name: loops.CredentialRotation, workflowType: runs.CredentialRotationType,
		wants: func(ctx context.Context) ([]loops.Want, error) {
			return objectRuns(ctx, r.Client, &osbv1alpha1.SFServiceBindingList{}, runs.CredentialRotationID, "",
				func(o ctrlclient.Object) bool { return rotating(o.(*osbv1alpha1.SFServiceBinding)) })
		},
		wake: func(ctx context.Context, w loops.Want) error {
			var b osbv1alpha1.SFServiceBinding
			if err := r.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: w.Namespace, Name: w.Name}, &b); err != nil {
				return ctrlclient.IgnoreNotFound(err)
			}
			return r.signal(ctx, &b)
		}})
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFServiceBinding{}).Named("credentialrotation").
		WithOptions(copts()).Complete(reconcile.Func(r.Reconcile)); err != nil {
		return fmt.Errorf("registering the credential rotation reconciler: %w", err)
	}
	return nil
}

// rotating says whether b's credentials rotate and are published: its
// rotation workflow has work to keep.
func rotating(b *osbv1alpha1.SFServiceBinding) bool {
	return !rotation.IsSuccessor(b) && b.Status.Rotation != nil && b.Status.Rotation.Generation > 0 && b.DeletionTimestamp.IsZero()
}

// Reconcile starts or signals the rotation of a binding whose policy,
// force annotation or deletion it has not signalled yet.
func (r *CredentialRotations) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b osbv1alpha1.SFServiceBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.signaled, req.String())
			r.mu.Unlock()
		}
		return ctrl.Result{}, ctrlclient.IgnoreNotFound(err)
	}
	if b.Status.Rotation == nil || b.Status.Rotation.Generation == 0 || rotation.IsSuccessor(&b) {
		return ctrl.Result{}, nil
	}
	what := fmt.Sprintf("%s/%d/%s/%t", b.UID, b.Generation, b.Annotations[osbv1alpha1.RotateAnnotation], !b.DeletionTimestamp.IsZero())
	r.mu.Lock()
	seen := r.signaled[req.String()] == what
	r.mu.Unlock()
	if seen {
		return ctrl.Result{}, nil
	}
	if !b.DeletionTimestamp.IsZero() {
		// Only a running rotation needs to hear of it: it ends.
		err := r.Temporal.SignalWorkflow(ctx, runs.CredentialRotationID(b.Namespace, b.Name), "", runs.SignalRotationChanged, what)
		var gone *serviceerror.NotFound
		if err != nil && !errors.As(err, &gone) {
			return ctrl.Result{}, fmt.Errorf("signalling the rotation of binding %s: %w", req, err)
		}
	} else if err := r.signal(ctx, &b); err != nil {
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	r.signaled[req.String()] = what
	r.mu.Unlock()
	return ctrl.Result{}, nil
}

// signal starts b's rotation workflow, or signals the running one.
func (r *CredentialRotations) signal(ctx context.Context, b *osbv1alpha1.SFServiceBinding) error {
	id := runs.CredentialRotationID(b.Namespace, b.Name)
	opts := runs.LoopOptions(id, b.Namespace, fairness.Background, fmt.Sprintf("credential rotation of binding %s/%s", b.Namespace, b.Name),
		fmt.Sprintf("kubectl get sfservicebinding %s -n %s -o jsonpath='{.status.rotation}'", b.Name, b.Namespace))
	if _, err := r.Temporal.SignalWithStartWorkflow(ctx, id, runs.SignalRotationChanged, "changed", opts,
		runs.CredentialRotationType, lifecycle.BindingTarget(b)); err != nil {
		return fmt.Errorf("signalling the rotation of binding %s/%s: %w", b.Namespace, b.Name, err)
	}
	log.FromContext(ctx).V(1).Info("credential rotation signalled", "workflowID", id)
	return nil
}
