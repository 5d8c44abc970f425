package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/controlplane"
)

// Sister is a cluster of its own for one test, apart from the shared
// cluster, to register as an SFCluster.
type Sister struct {
	*Cluster
	cp *controlplane.ControlPlane
}

// StartSister starts a sister cluster, stopped when the test ends. With
// nodes 0 it is a kube-apiserver and etcd alone, with no controllers and
// no nodes (a test creates the nodes it wants); otherwise it is a cluster
// as `qm dev` runs one (garbage collector, scheduler) with that many
// simulated nodes.
func StartSister(t testing.TB, nodes int) *Sister {
	t.Helper()
	return startSister(t, controlplane.Options{BinDir: BinDir(), Bare: nodes == 0, Nodes: nodes, NoFsync: true, Env: ServerEnv})
}

// StartUncachedSister starts a bare sister whose API server has no watch
// cache: every list is read from etcd, so that etcd's compaction
// (CompactEtcd) expires an older continue token at once, as it does on
// any API server once its cache has moved past the token.
func StartUncachedSister(t testing.TB) *Sister {
	t.Helper()
	return startSister(t, controlplane.Options{BinDir: BinDir(), Bare: true, NoWatchCache: true, NoFsync: true, Env: ServerEnv})
}

func startSister(t testing.TB, opts controlplane.Options) *Sister {
	t.Helper()
	requireTool(t, "kube-apiserver")
	requireTool(t, "etcd")
	cp, err := controlplane.Start(opts)
	require.NoError(t, err, "starting a sister cluster")
	t.Cleanup(func() { _ = cp.Stop() })
	kube, err := crds.NewClient(cp.Config)
	require.NoError(t, err)
	return &Sister{Cluster: &Cluster{Config: cp.Config, Client: kube, Kubeconfig: cp.Kubeconfig, EtcdURL: cp.EtcdURL}, cp: cp}
}

// KubeconfigOf is a kubeconfig of a new user of the sister, in groups (none:
// a user that may do nothing beyond discovery).
func (s *Sister) KubeconfigOf(t testing.TB, user string, groups ...string) []byte {
	t.Helper()
	raw, err := s.cp.UserKubeconfig(user, groups...)
	require.NoError(t, err)
	return raw
}

// Stop stops the sister's API server for good: what an unreachable
// cluster looks like.
func (s *Sister) Stop(t testing.TB) {
	t.Helper()
	// An API server started again by Restart may not stop on SIGTERM in
	// time and be killed: either way it is gone, which is what counts.
	_ = s.cp.Stop()
	require.Eventually(t, func() bool {
		return s.Client.List(context.Background(), &corev1.NamespaceList{}) != nil
	}, 30*time.Second, 100*time.Millisecond, "the sister's API server stopped")
}

// Restart stops the sister's API server for down, and starts it again on
// the same data: a cluster that goes away for a while. It returns its
// error, as it is meant to run beside the test, on a goroutine of its own.
func (s *Sister) Restart(down time.Duration) error {
	if err := s.cp.RestartAPIServer(down); err != nil {
		return fmt.Errorf("restarting the sister's API server: %w", err)
	}
	return nil
}
