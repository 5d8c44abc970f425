package starter_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// stages are where one provision's time went, read from its run's
// history: asked is when the request was made, answered when the API (or
// the API server, for kubectl) answered it, seen when an informer saw it
// succeed.
type stages struct {
	id         string        // the run's workflow ID
	toAnswer   time.Duration // the request itself
	toStart    time.Duration // asked to the run's start: the request and the watcher's hop
	inRun      time.Duration // the run, start to completion
	queued     time.Duration // of inRun, workflow tasks waiting in Temporal's queue
	toSeen     time.Duration // completion to the informer's sight of succeeded
	tasks      int           // workflow tasks in the run
	timerFired int           // status polls that waited
}

// stagesOf reads the stages of the provisions names from their runs'
// histories.
func stagesOf(b *testing.B, s *testenv.System, namespace string, names []string, asked, answered, seen map[string]time.Time) []stages {
	out := make([]stages, 0, len(names))
	for _, name := range names {
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: namespace, Name: name})
		h, err := s.ReadHistory(id, "")
		if err != nil {
			b.Logf("no stages for %s: %v", name, err)
			continue
		}
		started, closed := h.Events[0].GetEventTime().AsTime(), h.Events[len(h.Events)-1].GetEventTime().AsTime()
		st := stages{id: id, toAnswer: answered[name].Sub(asked[name]), toStart: started.Sub(asked[name]),
			inRun: closed.Sub(started), toSeen: seen[name].Sub(closed)}
		var scheduled time.Time
		for _, ev := range h.Events {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
				scheduled = ev.GetEventTime().AsTime()
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				st.tasks++
				st.queued += ev.GetEventTime().AsTime().Sub(scheduled)
			case enumspb.EVENT_TYPE_TIMER_FIRED:
				st.timerFired++
			}
		}
		out = append(out, st)
	}
	return out
}

// summarize says each stage's median and maximum over the provisions.
func summarize(all []stages) string {
	if len(all) == 0 {
		return "no stages read"
	}
	stat := func(of func(stages) time.Duration) string {
		d := make([]time.Duration, 0, len(all))
		for _, st := range all {
			d = append(d, of(st))
		}
		slices.Sort(d)
		return fmt.Sprintf("%s/%s", d[len(d)/2].Round(10*time.Millisecond), d[len(d)-1].Round(10*time.Millisecond))
	}
	tasks, timers := 0, 0
	for _, st := range all {
		tasks += st.tasks
		timers += st.timerFired
	}
	return fmt.Sprintf("request %s, asked to the run's start %s, the run %s (queued %s), to seen %s (p50/max); %.1f workflow tasks and %.1f polls a run",
		stat(func(s stages) time.Duration { return s.toAnswer }), stat(func(s stages) time.Duration { return s.toStart }),
		stat(func(s stages) time.Duration { return s.inRun }), stat(func(s stages) time.Duration { return s.queued }),
		stat(func(s stages) time.Duration { return s.toSeen }), float64(tasks)/float64(len(all)), float64(timers)/float64(len(all)))
}

// runTimes are the runs' times, start to completion, by workflow ID.
func runTimes(all []stages) map[string]time.Duration {
	out := make(map[string]time.Duration, len(all))
	for _, st := range all {
		out[st.id] = st.inRun
	}
	return out
}
