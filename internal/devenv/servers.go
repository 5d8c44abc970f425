package devenv

// The embedded servers qm dev starts, or the existing ones it connects to
// instead, and the check that their ports are free.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/internal/devserver"
)

// startKubernetes connects to o.Kubeconfig, or starts the embedded control
// plane and writes its kubeconfig under the data directory.
func startKubernetes(o Options) (*rest.Config, string, func(), error) {
	if o.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, "", nil, fmt.Errorf("reading kubeconfig %s: %w", o.Kubeconfig, err)
		}
		switch err := controlplane.InstallCRDs(cfg); {
		case errors.Is(err, controlplane.ErrNoAdmissionPolicies):
			fmt.Fprintf(o.Out, "Note: %v.\n", err)
		case err != nil:
			return nil, "", nil, err
		}
		return cfg, o.Kubeconfig, func() {}, nil
	}

	logFile, err := os.OpenFile(filepath.Join(o.DataDir, "logs", "controlplane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", nil, err
	}
	fmt.Fprintf(o.Out, "Starting Kubernetes: kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok's nodes (data in %s)...\n", filepath.Join(o.DataDir, "etcd"))
	cp, err := controlplane.Start(controlplane.Options{
		BinDir:  o.BinDir,
		DataDir: o.DataDir,
		Port:    o.KubePort,
		Out:     logFile,
	})
	if err != nil {
		logFile.Close()
		return nil, "", nil, fmt.Errorf("%w (see %s)", err, logFile.Name())
	}
	path, err := filepath.Abs(filepath.Join(o.DataDir, "kubeconfig"))
	if err == nil {
		err = os.WriteFile(path, cp.Kubeconfig, 0o600)
	}
	if err != nil {
		_ = cp.Stop()
		logFile.Close()
		return nil, "", nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	stop := func() {
		if err := cp.Stop(); err != nil {
			o.Logger.Warn("stopping the control plane", "error", err)
		}
		logFile.Close()
	}
	return cp.Config, path, stop, nil
}

// startTemporal connects to o.TemporalAddress, or starts the dev server with
// SQLite under the data directory and the Web UI, for sv to supervise.
func startTemporal(ctx context.Context, o Options, sv *supervisor) (client.Client, string, func(), error) {
	if o.Temporal != nil {
		tc, err := o.Temporal(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		return tc, "(the UI of the Temporal at " + o.TemporalAddress + ")", tc.Close, nil
	}

	logFile, err := os.OpenFile(filepath.Join(o.DataDir, "logs", "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", nil, err
	}
	fmt.Fprintf(o.Out, "Starting the Temporal dev server (history in %s)...\n", filepath.Join(o.DataDir, "temporal.db"))
	sv.temporal = devserver.Options{
		Path:      filepath.Join(o.BinDir, "temporal"),
		RunDir:    filepath.Join(o.DataDir, "temporal"),
		DBFile:    filepath.Join(o.DataDir, "temporal.db"),
		Address:   o.temporalAddress(),
		UIPort:    o.UIPort,
		Namespace: o.Namespace,
		Out:       logFile,
		Logger:    o.Logger,
	}
	srv, err := devserver.Start(ctx, sv.temporal)
	if err != nil {
		logFile.Close()
		return nil, "", nil, fmt.Errorf("%w (see %s)", err, logFile.Name())
	}
	sv.srv = srv
	tc := srv.Client()
	if o.TemporalMetrics != nil {
		// The same connection, with the metrics recorded.
		if tc, err = client.NewClientFromExisting(tc, client.Options{MetricsHandler: o.TemporalMetrics,
			Logger: log.NewStructuredLogger(cmp.Or(o.Logger, slog.Default()))}); err != nil {
			_ = srv.Stop()
			logFile.Close()
			return nil, "", nil, fmt.Errorf("a client of the Temporal dev server that records its metrics: %w", err)
		}
	}
	stop := func() {
		tc.Close()
		// On Ctrl-C the terminal interrupts the dev server too; it may be gone already.
		if err := sv.srv.Stop(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			o.Logger.Debug("stopping the Temporal dev server", "error", err)
		}
		logFile.Close()
	}
	return tc, fmt.Sprintf("http://127.0.0.1:%d", o.UIPort), stop, nil
}

// portFree fails with a message naming the port and its use when something
// already listens on it.
//
// It gives a process that is still exiting (the server of a qm dev killed
// a moment ago, whose threads are not all gone) a few seconds to let go.
func portFree(port int, what string) error {
	deadline := time.Now().Add(portWait)
	for {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return ln.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d (%s) is already in use; stop whatever holds it or choose another port: %w", port, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// portWait is how long portFree waits for a port to be let go.
const portWait = 5 * time.Second
