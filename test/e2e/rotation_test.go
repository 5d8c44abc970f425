package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestRotationSurvivesAWorkerKilledMidway: the worker, a process, is
// SIGKILLed while a forced rotation waits for its successor's bind, and
// a new one takes over. The rotation completes once: generation 2 is
// published once, no third successor is made, and the first one is
// retired after its overlap.
func TestRotationSurvivesAWorkerKilledMidway(t *testing.T) {
	e := newIsolatedProcessEnv(t)
	qm, kube, s := e.qm, e.kube, e.s
	ctx := context.Background()
	common := slices.Concat(e.common, []string{"--health-addr", "0", "--metrics-addr", "0"})
	start(t, qm, "watcher", nil, append([]string{"watcher", "--leader-elect=false"}, common...)...)
	first := start(t, qm, "worker-1", nil, append([]string{"worker"}, common...)...)
	plan := s.Plan("gated", "  bindingRotatable: true", testenv.Templates("gated-binding"))
	s.Instance("db", plan, "")
	s.WaitInstance("db", "provisioned", testenv.Succeeded(1))
	s.OpenGate("db", "bind-gate")
	s.OpenGate("db", "unbind-gate")
	s.Create(fmt.Sprintf(`
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFServiceBinding
metadata: {name: app, namespace: %s}
spec: {id: app, instanceId: db, serviceId: %s, planId: %s, rotation: {every: 1h, keepFor: 5s}}`, s.Namespace, s.ServiceID, plan))
	binding := func(c require.TestingT, name string) *osbv1alpha1.SFServiceBinding {
		var b osbv1alpha1.SFServiceBinding
		require.NoError(c, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &b))
		return &b
	}
	rotated := func(gen int64) *osbv1alpha1.SFServiceBinding {
		var b *osbv1alpha1.SFServiceBinding
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			b = binding(c, "app")
			assert.Equal(c, osbv1alpha1.StateSucceeded, b.Status.State, b.Status.Description)
			if assert.NotNil(c, b.Status.Rotation) {
				assert.Equal(c, gen, b.Status.Rotation.Generation)
			}
		}, time.Minute, 50*time.Millisecond, "app publishes generation %d", gen)
		return b
	}
	rotated(1)

	// The gate closed: the next successor's bind waits.
	require.NoError(t, kube.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "db-bind-gate"}}))
	kube.Kubectl(t, "", "annotate", "sfservicebinding", "app", "-n", s.Namespace, osbv1alpha1.RotateAnnotation+"=now")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, osbv1alpha1.StateInProgress, binding(c, "app-r2").Status.State)
	}, 30*time.Second, 50*time.Millisecond, "the successor's bind waits at the gate")

	// SIGKILL: no drain, whatever the worker held is lost with it.
	first.kill(t)
	start(t, qm, "worker-2", nil, append([]string{"worker"}, common...)...)
	s.OpenGate("db", "bind-gate")
	b := rotated(2)
	assert.Equal(t, "app-r2", b.Status.Rotation.Current)
	assert.Equal(t, "now", b.Status.Rotation.Forced)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "app-r1"}, &osbv1alpha1.SFServiceBinding{})
		assert.True(c, apierrors.IsNotFound(err), "the first successor is retired: %v", err)
		assert.Empty(c, binding(c, "app").Status.Rotation.Retiring)
	}, time.Minute, 50*time.Millisecond, "the overlap ends")

	// Once: one Event for the generation, and no successor beyond it.
	var events corev1.EventList
	require.NoError(t, kube.Client.List(ctx, &events, ctrlclient.InNamespace(s.Namespace)))
	published := 0
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "app" && e.Reason == "Rotated" && strings.Contains(e.Message, "generation 2 published") {
			published += int(max(e.Count, 1))
		}
	}
	assert.Equal(t, 1, published, "generation 2 is published once")
	var all osbv1alpha1.SFServiceBindingList
	require.NoError(t, kube.Client.List(ctx, &all, ctrlclient.InNamespace(s.Namespace)))
	var names []string
	for _, x := range all.Items {
		names = append(names, x.Name)
	}
	assert.ElementsMatch(t, []string{"app", "app-r2"}, names, "nothing half done is left")
	assert.EqualValues(t, 2, binding(t, "app").Status.Rotation.Generation)
}
