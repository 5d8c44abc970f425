package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/starter"
)

// TestWatcherLeavesRegistriesOut: the watcher's cache of Secrets holds a
// user's Secret (a binding's, for servicebinding.io) but not the registry
// Secrets Quartermaster keeps beside each instance and binding.
func TestWatcherLeavesRegistriesOut(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	mgr, err := starter.NewWatcher(kube.Config, testenv.Temporal(t), starter.WatcherOptions{})
	require.NoError(t, err)
	running, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(running) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	ctx := context.Background()
	require.NoError(t, kube.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-credentials", Namespace: ns}}))
	require.NoError(t, kube.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "qm-instance-db", Namespace: ns,
		Labels: map[string]string{registry.Label: "instance"}}, Type: registry.SecretType}))

	cached := func() ([]string, error) {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
		if err := mgr.GetCache().List(ctx, list, ctrlclient.InNamespace(ns)); err != nil {
			return nil, err
		}
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name)
		}
		return names, nil
	}
	// Until the manager has started its cache, a list fails ("the cache
	// is not started"): that is not the cache's content.
	require.Eventually(t, func() bool {
		names, err := cached()
		return err == nil && len(names) > 0
	}, 30*time.Second, 100*time.Millisecond, "the watcher caches the namespace's Secrets")
	names, err := cached()
	require.NoError(t, err)
	assert.Equal(t, []string{"db-credentials"}, names, "the user's Secret, not the registry's")
}
