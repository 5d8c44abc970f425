// Package controlplane runs a real Kubernetes control plane (kube-apiserver
// and etcd, built into bin/ by `make tools`) through controller-runtime's
// envtest, and installs Quartermaster's CRDs on it or on any other cluster.
// It is what `qm dev` and the integration tests stand on.
package controlplane

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/quartermaster/qm/crds"
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
// every Quartermaster CRD.
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
	return &ControlPlane{env: env, Config: cfg, Kubeconfig: env.KubeConfig}, nil
}

// Stop stops kube-apiserver and etcd. etcd's data stays if Options.DataDir was set.
func (c *ControlPlane) Stop() error {
	return c.env.Stop()
}

// InstallCRDs creates or updates every Quartermaster CRD on the cluster that
// cfg reaches, and waits until they are established.
func InstallCRDs(cfg *rest.Config) error {
	defs, err := crds.Definitions()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: defs, Scheme: crds.NewScheme()}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	return nil
}
