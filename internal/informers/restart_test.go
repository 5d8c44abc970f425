package informers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/controlplane"
	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// restarts is how many times the test restarts kube-apiserver: enough for
// client-go's backoff alone to leave an informer blind for longer than
// seenWithin after the last (800 ms doubling, with up to as much again in
// jitter: 6.4 to 12.8 s after the fourth). seenWithin leaves a loaded
// machine room over the half second to two seconds it takes here (one CI
// run saw 3.0 s).
const (
	restarts   = 4
	seenWithin = 5 * time.Second
)

// An informer sees an instance made right after kube-apiserver restarted,
// each of several times in a row: the expired resource version that the
// new API server's watch cache answers the resumed watch with costs no
// step of client-go's backoff.
func TestAnInformerSeesChangesRightAfterEachAPIServerRestart(t *testing.T) {
	cp, err := controlplane.Start(controlplane.Options{BinDir: testenv.BinDir(), Bare: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Stop() })
	require.NoError(t, controlplane.InstallCRDs(cp.Config))
	kube, err := ctrlclient.New(cp.Config, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{"apps", "other"} {
		require.NoError(t, kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	c, err := cache.New(cp.Config, cache.Options{Scheme: crds.NewScheme(), NewInformer: informers.New})
	require.NoError(t, err)
	_, err = c.GetInformer(ctx, &osbv1alpha1.SFServiceInstance{})
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))

	for round := range restarts {
		// A write of another kind moves etcd's revision past the last
		// the informer saw, so that the restarted API server's watch
		// cache begins after it and the resumed watch expires.
		require.NoError(t, kube.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: fmt.Sprintf("before-%d", round)}}))
		require.NoError(t, cp.RestartAPIServer(time.Second)) // at once, its port may still be taken
		name := fmt.Sprintf("after-%d", round)
		inst := &osbv1alpha1.SFServiceInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: osbv1alpha1.SFServiceInstanceSpec{InstanceID: name, ServiceID: "s", PlanID: "p"}}
		// The API server serves the instances a few seconds after it is
		// ready: the create is tried until it is.
		require.Eventually(t, func() bool { return kube.Create(ctx, inst) == nil }, time.Minute, 50*time.Millisecond, "round %d: the instance is created", round)
		created := time.Now()
		assert.Eventually(t, func() bool {
			return c.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), &osbv1alpha1.SFServiceInstance{}) == nil
		}, seenWithin, 20*time.Millisecond, "round %d: the informer sees the instance within %s of its creation", round, seenWithin)
		t.Logf("round %d: seen %s after its creation", round, time.Since(created).Round(time.Millisecond))
	}
}
