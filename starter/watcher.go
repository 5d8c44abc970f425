// Package starter turns Kubernetes resource events into Temporal workflow
// starts and signals (the watcher), and holds the admin commands that start
// or steer workflows. It holds no business logic: that lives in workflows.
package starter

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// WatcherOptions configure the watcher.
type WatcherOptions struct {
	// LeaderElection makes one of several watcher replicas the active one.
	LeaderElection bool
	// LeaderElectionNamespace holds the lease; empty means the namespace qm runs in.
	LeaderElectionNamespace string
	// HealthAddr serves /healthz and /readyz; empty or "0" turns them off.
	HealthAddr string
}

// NewWatcher returns a controller-runtime manager with the watcher's reconcilers.
func NewWatcher(cfg *rest.Config, tc client.Client, opts WatcherOptions) (ctrl.Manager, error) {
	healthAddr := opts.HealthAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  crds.NewScheme(),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "qm-watcher.quartermaster.io",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		HealthProbeBindAddress:  healthAddr,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		// A process may build a second watcher after the first stopped (qm dev
		// restarted in-process, tests); controller names stay unique per manager.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the watcher's manager: %w", err)
	}
	if healthAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	r := &instanceReconciler{mgr: mgr, temporal: tc}
	if err := ctrl.NewControllerManagedBy(mgr).For(&osbv1alpha1.SFServiceInstance{}).Named("sfserviceinstance").Complete(r); err != nil {
		return nil, fmt.Errorf("registering the SFServiceInstance reconciler: %w", err)
	}
	return mgr, nil
}

// instanceReconciler observes SFServiceInstances. Until the provisioning
// workflows land it only logs what it would start.
type instanceReconciler struct {
	mgr      ctrl.Manager
	temporal client.Client
}

func (r *instanceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var inst osbv1alpha1.SFServiceInstance
	if err := r.mgr.GetClient().Get(ctx, req.NamespacedName, &inst); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	log.FromContext(ctx).Info("observed SFServiceInstance",
		"generation", inst.Generation, "state", inst.Status.State,
		"serviceId", inst.Spec.ServiceID, "planId", inst.Spec.PlanID)
	return ctrl.Result{}, nil
}
