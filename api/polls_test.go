package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestPollsAcrossReplicas: two API replicas, each with its own cache. A
// platform's operation, accepted by one, is polled at the other from the
// moment it is accepted: never missing, never the state of the operation
// before it, and its end is seen.
func TestPollsAcrossReplicas(t *testing.T) {
	a := testenv.Start(t, testenv.Parts{Parallel: true, API: true, Worker: true, Watcher: true})
	b := testenv.Start(t, testenv.Parts{API: true, Namespace: a.Namespace, ServiceID: a.ServiceID})
	plan := a.Plan("gated", "  manager: {async: true}", testenv.Templates("gated"))
	inst := "/v2/service_instances/polled"
	// pollB polls replica b for op while it is in progress, checking every
	// answer, and returns the first state that is not "in progress".
	pollB := func(op string, until func() bool) string {
		t.Helper()
		for {
			status, body, _ := b.Do(http.MethodGet, inst+"/last_operation?operation="+op, "", nil)
			if op == "deprovision" && status == http.StatusGone {
				return "gone"
			}
			require.Equal(t, http.StatusOK, status, "%s on the other replica: %s", op, body)
			if !assert.Contains(t, body, `"state":"in progress"`) {
				return body
			}
			if until() {
				return ""
			}
			time.Sleep(5 * time.Millisecond) // a platform's poll pace
		}
	}
	polls := func(n int) func() bool {
		return func() bool { n--; return n <= 0 }
	}

	a.Expect(http.MethodPut, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "plan_id": %q, "organization_guid": "o", "space_guid": "s"}`, a.ServiceID, plan),
		http.StatusAccepted, `{"operation": "provision"}`)
	assert.Empty(t, pollB("provision", polls(50)), "the provision waits for its gate")
	a.OpenGate("polled", "gate")
	assert.Eventually(t, func() bool {
		_, body, _ := b.Request(http.MethodGet, inst+"/last_operation?operation=provision", "", nil)
		return assert.ObjectsAreEqual(`{"state":"succeeded","description":"ready"}`, body)
	}, 30*time.Second, 20*time.Millisecond, "the other replica sees the provision end")

	a.Expect(http.MethodPatch, inst+"?accepts_incomplete=true", fmt.Sprintf(`{"service_id": %q, "parameters": {"size": "large"}}`, a.ServiceID),
		http.StatusAccepted, `{"operation": "update-2", "dashboard_url": "https://dashboard.example/polled"}`)
	assert.Empty(t, pollB("update-2", polls(50)), "the update is in progress, not the provision's success")
	a.OpenGate("polled", "update-gate")
	assert.Eventually(t, func() bool {
		_, body, _ := b.Request(http.MethodGet, inst+"/last_operation?operation=update-2", "", nil)
		return assert.ObjectsAreEqual(`{"state":"succeeded","description":"now gated"}`, body)
	}, 30*time.Second, 20*time.Millisecond, "the other replica sees the update end")

	a.Expect(http.MethodDelete, inst+fmt.Sprintf("?accepts_incomplete=true&service_id=%s&plan_id=%s", a.ServiceID, plan), "",
		http.StatusAccepted, `{"operation": "deprovision"}`)
	assert.Equal(t, "gone", pollB("deprovision", func() bool { return false }), "the other replica follows the deprovision to 410 Gone")
}
