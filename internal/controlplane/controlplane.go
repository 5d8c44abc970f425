// Package controlplane runs a real Kubernetes control plane (kube-apiserver
// and etcd, built into bin/ by `make tools`) through controller-runtime's
// envtest, and installs Quartermaster's CRDs on it or on any other cluster.
// It is what `qm dev` and the integration tests stand on.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Options configure an embedded control plane.
type Options struct {
	// BinDir holds the kube-apiserver and etcd binaries.
	BinDir string
	// DataDir keeps etcd's data across restarts. Empty means a temporary
	// directory that is removed on Stop.
	DataDir string
	// Port is the API server's secure port on 127.0.0.1; 0 picks a free one.
	Port int
	// Out receives the output of both processes; nil discards it.
	Out io.Writer
}

// ControlPlane is a running kube-apiserver and etcd with the CRDs installed.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is Config as a kubeconfig file, for kubectl.
	Kubeconfig []byte
}

// Start starts etcd and kube-apiserver, waits until they serve, and installs
// every Quartermaster CRD and admission policy.
func Start(opts Options) (*ControlPlane, error) {
	defs, err := crds.Definitions()
	if err != nil {
		return nil, err
	}
	etcd := &envtest.Etcd{Out: opts.Out, Err: opts.Out}
	if opts.DataDir != "" {
		etcd.DataDir, err = filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, err
		}
	}
	apiServer := &envtest.APIServer{Out: opts.Out, Err: opts.Out}
	if opts.Port != 0 {
		apiServer.SecureServing.Address = "127.0.0.1"
		apiServer.SecureServing.Port = strconv.Itoa(opts.Port)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinDir,
		ControlPlane:             envtest.ControlPlane{Etcd: etcd, APIServer: apiServer},
		CRDInstallOptions:        envtest.CRDInstallOptions{CRDs: defs},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		Scheme:                   crds.NewScheme(),
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", opts.BinDir, err)
	}
	if err := InstallAdmissionPolicies(cfg); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{env: env, Config: cfg, Kubeconfig: env.KubeConfig}, nil
}

// Stop stops kube-apiserver and etcd. etcd's data stays if Options.DataDir was set.
func (c *ControlPlane) Stop() error {
	return c.env.Stop()
}

// InstallCRDs creates or updates every Quartermaster CRD on the cluster that
// cfg reaches, and waits until they are established. It installs the
// admission policies as well where the cluster has them (Kubernetes 1.36
// and later); on an older cluster the watcher adds finalizers instead, and
// ErrNoAdmissionPolicies says so.
func InstallCRDs(cfg *rest.Config) error {
	defs, err := crds.Definitions()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: defs, Scheme: crds.NewScheme()}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	return InstallAdmissionPolicies(cfg)
}

// ErrNoAdmissionPolicies means the cluster serves no MutatingAdmissionPolicy
// API, so finalizers are added by the watcher after each create.
var ErrNoAdmissionPolicies = errors.New("the cluster has no MutatingAdmissionPolicy API (Kubernetes < 1.36): the watcher adds finalizers after each create")

// fieldOwner names qm in the managed fields of what it installs.
const fieldOwner = client.FieldOwner("qm")

// InstallAdmissionPolicies applies the policies that give new instances and
// bindings their finalizers, and waits until the API server enforces them:
// policies take effect some moments after they are written.
func InstallAdmissionPolicies(cfg *rest.Config) error {
	objs, err := crds.AdmissionPolicies()
	if err != nil {
		return err
	}
	c, err := crds.NewClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, obj := range objs {
		if err := c.Patch(ctx, obj, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
			if meta.IsNoMatchError(err) {
				return ErrNoAdmissionPolicies
			}
			return fmt.Errorf("applying %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	// A dry-run create goes through admission and stores nothing.
	probe := func(obj client.Object, finalizer string) wait.ConditionWithContextFunc {
		return func(ctx context.Context) (bool, error) {
			o := obj.DeepCopyObject().(client.Object)
			err := c.Create(ctx, o, client.DryRunAll)
			if meta.IsNoMatchError(err) || apierrors.IsServiceUnavailable(err) {
				// The CRD is established but not yet discovered, or not yet
				// known to the policies' type checker (a 503 until then).
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("dry-run create of a %T to check the admission policies: %w", o, err)
			}
			return slices.Contains(o.GetFinalizers(), finalizer), nil
		}
	}
	probeMeta := metav1.ObjectMeta{Name: "qm-admission-probe", Namespace: metav1.NamespaceDefault}
	checks := []wait.ConditionWithContextFunc{
		probe(&osbv1alpha1.SFServiceInstance{ObjectMeta: probeMeta, Spec: osbv1alpha1.SFServiceInstanceSpec{ServiceID: "probe", PlanID: "probe"}}, osbv1alpha1.InstanceFinalizer),
		probe(&osbv1alpha1.SFServiceBinding{ObjectMeta: probeMeta, Spec: osbv1alpha1.SFServiceBindingSpec{ID: "probe", InstanceID: "probe", ServiceID: "probe", PlanID: "probe"}}, osbv1alpha1.BindingFinalizer),
	}
	for _, check := range checks {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, check); err != nil {
			return fmt.Errorf("waiting for the finalizer admission policies to take effect: %w", err)
		}
	}
	return nil
}
