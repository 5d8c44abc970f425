package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestOnATemporalCluster is `make test`'s guard of the production shape
// (`make test-cluster` runs every capability on it): an OSB lifecycle on a
// Temporal cluster of PostgreSQL and four services, each a process, with
// the history service killed while the provision runs. The operator finds
// each operation's run in visibility by its search attributes.
func TestOnATemporalCluster(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true, TemporalCluster: true})
	ctx := context.Background()
	plan := s.Plan("small", "  manager: {async: true}", testenv.Templates("gated"))
	inst := "/v2/service_instances/tc-1"

	s.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "org", "space_guid": "space"}`,
		s.ServiceID, plan), http.StatusAccepted, `{"operation": "provision"}`)
	s.ExpectSoon(inst+"/last_operation?operation=provision", http.StatusOK, `{"state": "in progress", "description": "waiting for the gate"}`)

	// The history service dies, owning every shard, while the provision
	// waits; it comes back after a second, and the run goes on where it was.
	require.NoError(t, s.TemporalCluster.Kill(ctx, "history", time.Second))
	s.OpenGate("tc-1", "gate")
	assert.Equal(t, "succeeded", s.PollLastOperation(inst + "/last_operation?operation=provision")["state"])

	body := s.Expect(http.MethodPut, inst+"/service_bindings/b-1", fmt.Sprintf(`{"service_id": %q, "plan_id": %q}`, s.ServiceID, plan),
		http.StatusCreated, "")
	assert.Contains(t, body, `"credentials"`)
	s.Expect(http.MethodDelete, inst+fmt.Sprintf("/service_bindings/b-1?service_id=%s&plan_id=%s", s.ServiceID, plan), "", http.StatusOK, "{}")
	s.Expect(http.MethodDelete, inst+fmt.Sprintf("?accepts_incomplete=true&service_id=%s&plan_id=%s", s.ServiceID, plan), "",
		http.StatusAccepted, `{"operation": "deprovision"}`)
	s.ExpectSoon(inst+"/last_operation?operation=deprovision", http.StatusGone, "{}")

	for _, op := range []string{"provision", "deprovision"} {
		query := fmt.Sprintf(`InstanceID = "tc-1" AND Operation = %q AND QmState = "succeeded"`, op)
		assert.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			require.NoError(c, err, query)
			assert.Len(c, resp.GetExecutions(), 1, "runs in visibility for %s", query)
		}, 30*time.Second, 200*time.Millisecond)
	}
}
