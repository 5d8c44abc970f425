package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/sharding"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestShardsChangeUnderLoad: two watcher shards give way to three while
// provisions arrive, as docs/sharding.md says an operator changes their
// number (the new ones start before the old ones stop, so a bucket has two
// owners for a moment): every instance succeeds, each with one run that
// did its work.
// Then a user moves an instance to another bucket by its label: its next
// operation is started by the shard that owns that bucket, and by no other.
func TestShardsChangeUnderLoad(t *testing.T) {
	const provisions, rate = 40, 10
	e := newIsolatedProcessEnv(t)
	qm, kube, s := e.qm, e.kube, e.s
	ns := s.Namespace
	ctx := context.Background()
	plan := s.Plan("resharded", "  manager: {async: true}\n", testenv.Templates("instant"))
	start(t, qm, "worker", nil, slices.Concat([]string{"worker", "--health-addr", "0", "--metrics-addr", "0"}, e.common)...)
	shards := func(count int) []*process {
		var ps []*process
		for i := range count {
			ps = append(ps, start(t, qm, fmt.Sprintf("watcher-%d-of-%d", i, count), nil, slices.Concat([]string{"watcher",
				"--shard", fmt.Sprintf("%d/%d", i, count), "--leader-election-namespace", ns, "--health-addr", "0", "--metrics-addr", "0",
				"--leader-elect-lease-duration", leaseDuration.String(), "--leader-elect-renew-deadline", "4s",
				"--leader-elect-retry-period", retryPeriod.String()}, e.common)...))
		}
		return ps
	}
	two := shards(2)

	// The provisions arrive at a steady rate; halfway, the shards change.
	names := make([]string, provisions)
	var wg sync.WaitGroup
	errs := make(chan error, provisions)
	for i := range names {
		names[i] = fmt.Sprintf("r-%03d", i)
		wg.Add(1)
		time.AfterFunc(time.Duration(i)*time.Second/rate, func() {
			defer wg.Done()
			errs <- kube.Client.Create(ctx, &osbv1alpha1.SFServiceInstance{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]},
				Spec:       osbv1alpha1.SFServiceInstanceSpec{InstanceID: names[i], ServiceID: s.ServiceID, PlanID: plan},
			})
		})
	}
	for range provisions / 2 {
		require.NoError(t, <-errs, "creating an instance")
	}
	// The new shards start before the old ones stop, as a rollout of a
	// new StatefulSet size does: a bucket has two owners for a moment.
	shards(3)
	for _, p := range two {
		p.stop(t)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "creating an instance")
	}
	require.Eventually(t, func() bool {
		n, err := succeededIn(kube.Client, ns, "r-")
		return err == nil && n == provisions
	}, 3*time.Minute, 100*time.Millisecond, "every instance succeeds across the change of shards")
	for _, name := range names {
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: ns, Name: name})
		working, _ := s.WorkingRuns(t, id)
		assert.Equal(t, 1, working, "%s did its work in one run", id)
	}

	// A user moves r-000 to the next bucket, which the next shard owns.
	var moved osbv1alpha1.SFServiceInstance
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: names[0]}, &moved))
	bucket, ok := sharding.BucketOf(&moved)
	require.True(t, ok, "%s is labelled with its bucket", moved.Name)
	to := (bucket + 1) % sharding.Buckets
	kube.Kubectl(t, "", "label", "--overwrite", "sfserviceinstance", moved.Name, "-n", ns, sharding.Label+"="+strconv.Itoa(to))
	base := moved.DeepCopy()
	moved.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"moved": true}`)}
	require.NoError(t, kube.Client.Patch(ctx, &moved, ctrlclient.MergeFrom(base)))
	s.WaitInstance(moved.Name, "updated after its move", testenv.Succeeded(2))
	require.NoError(t, kube.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(&moved), &moved))
	assert.Equal(t, strconv.Itoa(to), moved.Labels[sharding.Label], "the user's bucket stays: no shard relabels a valid one")

	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: ns, Name: moved.Name})
	resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q AND WorkflowType = 'Update'", id)})
	require.NoError(t, err)
	require.Len(t, resp.Executions, 1, "one Update run")
	h := s.History(id, resp.Executions[0].GetExecution().GetRunId())
	identity := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetIdentity()
	assert.Regexp(t, fmt.Sprintf(`^qm-watcher shard %d/3 `, to%3), identity, "the update was started by the shard of the new bucket %d", to)
}
