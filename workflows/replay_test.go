package workflows_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/workflows"
)

// histories are the recorded paths of every workflow, each with what it
// shows. `make record-histories` records them again on the real dev server:
// the tests of starter that call recorded() write them. A new workflow, or a
// new path of one, adds its history here; TestReplayRecordedHistories fails
// while this list and workflows/testdata disagree.
var histories = []string{
	"provision",         // applied, and the status template says succeeded at once
	"provision-restart", // waits for its status template across a worker restart
	"early-exit",        // started again for a generation already done
	"update",
	"bind",
	"unbind",
	"deprovision",                  // no bindings left: removes what the instance applied
	"deprovision-unbinds-first",    // waits for the instance's bindings to be unbound, then removes it
	"template-failure",             // a template that does not render: failed, not retried
	"polling-timeout",              // the status never ends: failed at maximum_polling_duration
	"begin-failure",                // an unknown plan: failed in the first step
	"apply-retried",                // an apply that failed for a while, retried visibly, then succeeded
	"retries-exhausted",            // an apply that never stopped failing: failed at the deadline
	"healthchecks",                 // a health-check loop: signalled services, timed passes, services flipping
	"healthchecks-continue-as-new", // a loop's run that continued as new after its passes
	"claim",                        // a claim resolved through the allocator, moved, Pending (its re-check timer cancelled by a signal), resolved again, then deleted and released
	"claim-allocator",              // a namespace's allocator, running: passes that handed a claim its services
	"binding-usage",                // a usage injected, its workload gone and back, its Secret rotated, then deleted and removed
	"service-binding",              // a ServiceBinding projected, moved to a selector, its Secret rotated, gone and back, then deleted and taken back
	"mass-update",                  // a mass update of 20 instances in batches, completed
	"mass-update-steered",          // a mass update paused by its failure budget, resumed, paused again, cancelled
	"provision-scheduled",          // scheduled on a sister cluster first, then applied there
	"provision-waited-for-cluster", // waited while no cluster had room, then scheduled on a new one
	"bind-rotating",                // a binding with a rotation policy: its first successor bound, its credentials published
	"unbind-rotating",              // a rotating binding unbound: its successors deleted and waited for
	"credential-rotation",          // a binding's rotations: three scheduled, their predecessors retired, one forced, one failed
	"drift-checks",                 // a drift-check loop: passes that found an instance drifted and started its repair, and one reported
	"repair",                       // a Repair run: the drift compared anew, the templates applied again, the outcome recorded
	"repair-binding",               // a binding's Repair run: its bind template applied again, under the binding's workflow ID
}

// frozen are histories recorded by earlier code, kept as they are (never
// recorded again): each stands for runs that were in flight when a change
// came, which must finish on the new code through GetVersion's old path.
var frozen = map[string]string{
	"deprovision":               "before unbind-bindings-first and operator-view",
	"deprovision-unbinds-first": "before operator-view",
	"provision":                 "before operator-view",
	"provision-restart":         "before operator-view",
	"early-exit":                "before operator-view",
	"update":                    "before operator-view",
	"bind":                      "before operator-view",
	"unbind":                    "before operator-view",
	"template-failure":          "before operator-view: a failed operation completed its run",
	"polling-timeout":           "before operator-view: a failed operation completed its run",
	"claim":                     "before pending-recheck and claim-allocator: a Pending claim waited for a signal alone, and a claim took its service itself",
	"claim-rechecked":           "before claim-allocator: a claim took its service itself",
	"claim-allocated":           "before start-signals-read: a new claim read its start's signal after its first look, and looked and asked again",
	"claim-steps":               "before settled-in-one-step: a claim looked, bound and recorded in a step each, reading the claim in each",
	"claim-allocator":           "before allocator-wakes-from-give: a pass woke its claims with a signal each from the workflow",
	"mass-update":               "before updates-in-batches: a run started each update as its child",
	"mass-update-steered":       "before updates-in-batches: a run started each update as its child",
}

// TestReplayRecordedHistories replays histories recorded on the real dev
// server against the current workflow code. A change that would break a
// workflow already running in production fails here: a step added,
// removed or reordered, a timer added, or (which Temporal's own check
// lets through) a timer of another duration.
func TestReplayRecordedHistories(t *testing.T) {
	files := map[string]string{}
	for _, name := range histories {
		files[name] = filepath.Join("testdata", name+".json")
	}
	for name := range frozen {
		files["frozen/"+name] = filepath.Join("testdata", "frozen", name+".json")
	}
	found, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	frozenFound, err := filepath.Glob("testdata/frozen/*.json")
	require.NoError(t, err)
	var want []string
	for _, f := range files {
		want = append(want, f)
	}
	assert.ElementsMatch(t, want, append(found, frozenFound...), "every path has a recorded history, and every history is listed")

	for name, file := range files {
		t.Run(name, func(t *testing.T) {
			timers := &timerDurations{}
			r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
				Interceptors: []interceptor.WorkerInterceptor{timers},
			})
			require.NoError(t, err)
			workflows.Register(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, file))
			assert.Equal(t, recordedTimers(t, file), timers.seen, "each timer waits as long as when it was recorded")
		})
	}
}

// recordedTimers lists the durations of the timers a history started.
func recordedTimers(t *testing.T, file string) []time.Duration {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	h, err := client.HistoryFromJSON(strings.NewReader(string(raw)), client.HistoryJSONOptions{})
	require.NoError(t, err)
	return timerDurationsOf(h)
}

func timerDurationsOf(h *historypb.History) []time.Duration {
	var out []time.Duration
	for _, ev := range h.Events {
		if a := ev.GetTimerStartedEventAttributes(); a != nil {
			out = append(out, a.GetStartToFireTimeout().AsDuration())
		}
	}
	return out
}

// timerDurations records the duration of every timer the workflow code
// starts while it replays (workflow.Sleep starts one through NewTimer).
type timerDurations struct {
	interceptor.WorkerInterceptorBase
	seen []time.Duration
}

func (d *timerDurations) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &timerInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, d: d}
}

type timerInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	d *timerDurations
}

func (i *timerInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&timerOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, d: i.d})
}

type timerOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	d *timerDurations
}

func (o *timerOutbound) NewTimer(ctx workflow.Context, d time.Duration) workflow.Future {
	o.d.seen = append(o.d.seen, d)
	return o.Next.NewTimer(ctx, d)
}

func (o *timerOutbound) NewTimerWithOptions(ctx workflow.Context, d time.Duration, options workflow.TimerOptions) workflow.Future {
	o.d.seen = append(o.d.seen, d)
	return o.Next.NewTimerWithOptions(ctx, d, options)
}
