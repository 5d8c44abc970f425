package starter_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestDeletionProtection: an instance of a plan with deletionProtection is
// annotated as it is provisioned, by the API for OSB and by the watcher for
// kubectl; the API server refuses its deletion (the admission policy) and
// the OSB API its deprovision (422), each saying why and how to lift it;
// without the annotation it goes. An instance whose creator set the
// annotation to "false" is not protected.
func TestDeletionProtection(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true, API: true})
	ctx := context.Background()
	guarded := s.Plan("guarded", "  deletionProtection: true\n", testenv.Templates("instant"))

	s.Instance("k-1", guarded, "")
	inst := s.WaitInstance("k-1", "provisioned and protected", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateSucceeded && i.Protected()
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := s.Kube.Client.Delete(ctx, inst.DeepCopy(), ctrlclient.DryRunAll)
		assert.True(c, apierrors.IsForbidden(err), "the policy refuses: %v", err)
	}, 30*time.Second, 50*time.Millisecond, "the admission policy is in force")
	err := s.Kube.Client.Delete(ctx, inst.DeepCopy())
	require.True(t, apierrors.IsForbidden(err), "403: %v", err)
	assert.Contains(t, err.Error(), fmt.Sprintf(`SFServiceInstance %s/k-1 is protected from deletion (annotation quartermaster.io/deletion-protection: "true"); remove the annotation to delete it`, s.Namespace))
	require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(inst), inst))
	assert.Nil(t, inst.DeletionTimestamp, "the instance stays")

	s.Expect(http.MethodPut, "/v2/service_instances/o-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, s.ServiceID, guarded),
		http.StatusCreated, `{}`)
	deprovision := fmt.Sprintf("/v2/service_instances/o-1?service_id=%s&plan_id=%s", s.ServiceID, guarded)
	code, body, _ := s.Do(http.MethodDelete, deprovision, "", nil)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.Contains(t, body, `instance \"o-1\" is protected from deletion (annotation quartermaster.io/deletion-protection: \"true\"`)
	s.ExpectSoon("/v2/service_instances/o-1", http.StatusOK, fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, guarded))

	// Lifted, both go.
	for _, name := range []string{"k-1", "o-1"} {
		var i osbv1alpha1.SFServiceInstance
		require.NoError(t, s.Kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.Namespace, Name: name}, &i))
		base := i.DeepCopy()
		delete(i.Annotations, osbv1alpha1.DeletionProtectionAnnotation)
		require.NoError(t, s.Kube.Client.Patch(ctx, &i, ctrlclient.MergeFrom(base)))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, s.Kube.Client.Delete(ctx, inst.DeepCopy(), ctrlclient.DryRunAll))
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, s.Kube.Client.Delete(ctx, inst.DeepCopy()))
	s.WaitGone(inst)
	s.Expect(http.MethodDelete, deprovision, "", http.StatusOK, `{}`)

	// Opted out at creation.
	out := &osbv1alpha1.SFServiceInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "k-2", Namespace: s.Namespace, Annotations: map[string]string{osbv1alpha1.DeletionProtectionAnnotation: "false"}},
		Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: "k-2", ServiceID: s.ServiceID, PlanID: guarded},
	}
	require.NoError(t, s.Kube.Client.Create(ctx, out))
	provisioned := s.WaitInstance("k-2", "provisioned", testenv.Succeeded(1))
	assert.Equal(t, "false", provisioned.Annotations[osbv1alpha1.DeletionProtectionAnnotation], "the creator's choice stands")
	require.NoError(t, s.Kube.Client.Delete(ctx, out))
	s.WaitGone(out)
}
