package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestDeprovisionWaitsForUsers: an instance deleted with kubectl while it
// has bindings deprovisions nothing while they are there: its condition
// InUse and status name them, and the bindings are left to their users
// throughout; as each goes the condition follows, and once the last is
// gone the instance deprovisions.
func TestDeprovisionWaitsForUsers(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	plan := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("used-1", plan, "")
	inst := s.WaitInstance("used-1", "provisioned", testenv.Succeeded(1))
	var bindings []*osbv1alpha1.SFServiceBinding
	for _, name := range []string{"user-1", "user-2"} {
		bindings = append(bindings, s.Bind(name, "used-1", plan))
	}

	require.NoError(t, s.Kube.Client.Delete(ctx, inst))
	waiting := func(users string) func(*osbv1alpha1.SFServiceInstance) bool {
		want := "the deprovision waits for its users to go: " + users +
			" (annotate quartermaster.io/deprovision-in-use=true to have it delete the instance's bindings first)"
		return func(i *osbv1alpha1.SFServiceInstance) bool {
			c := meta.FindStatusCondition(i.Status.Conditions, osbv1alpha1.ConditionInUse)
			return c != nil && c.Status == metav1.ConditionTrue && c.Message == want && i.Status.Description == want
		}
	}
	s.WaitInstance("used-1", "waiting for both users", waiting("SFServiceBinding user-1, SFServiceBinding user-2"))
	assert.Never(t, func() bool {
		for _, b := range bindings {
			var now osbv1alpha1.SFServiceBinding
			if err := s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(b), &now); err != nil || now.DeletionTimestamp != nil {
				return true
			}
		}
		return false
	}, 3*time.Second, 50*time.Millisecond, "the bindings are left to their users")

	require.NoError(t, s.Kube.Client.Delete(ctx, bindings[0]))
	s.WaitGone(bindings[0])
	s.WaitInstance("used-1", "waiting for the one left", waiting("SFServiceBinding user-2"))
	require.NoError(t, s.Kube.Client.Delete(ctx, bindings[1]))
	s.WaitGone(bindings[1])
	s.WaitGone(inst)
	var cm corev1.ConfigMap
	assert.True(t, apierrors.IsNotFound(s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: "used-1-db"}, &cm)), "deprovisioned")
}
