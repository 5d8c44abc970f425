package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/quartermaster/qm/activities"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/workflows/runs"
)

// DriftChecks is the drift-check loop of one shard of the instances, for
// as long as Quartermaster runs:
//
//  1. wait for the next tick (the shortest period its instances' plans
//     ask for, a minute at most);
//  2. pass over the shard: compare each instance, and each binding of
//     one, whose instant has come with what its last operation applied;
//     report what drifted, or start its Repair run;
//  3. continue as new now and then, so that the history stays small.
//
// The settings live in the plans and the findings in the instances'
// status; the loop carries only where its last window ended.
func DriftChecks(ctx workflow.Context, in runs.DriftChecksInput) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// A pass compares every due instance of the shard: many at once
		// may take a while. The workflow task is extended while it runs.
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 3},
	})
	if in.Tick <= 0 {
		in.Tick = firstTick
	}
	var d *activities.Drift
	for passes := 0; passes < passesPerRun && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); passes++ {
		if err := workflow.Sleep(ctx, in.Tick); err != nil {
			return err // cancelled by an operator: the watcher starts it again
		}
		now := workflow.Now(ctx)
		from := in.Last
		if from.IsZero() {
			from = now.Add(-in.Tick)
		}
		var done activities.DriftPassed
		err := workflow.ExecuteLocalActivity(ctx, d.CheckInstances, activities.DriftPass{Shard: in.Shard, From: from, To: now}).Get(ctx, &done)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Not counted: the next pass covers this one's window.
			workflow.GetLogger(ctx).Warn("a drift-check pass failed; the next one covers its window", "error", err)
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("the pass at %s failed: %v\n\n%s", now.UTC().Format(time.RFC3339), err, recentDrift(in.Recent)))
			continue
		}
		in.Last, in.Tick = now, done.Tick
		in.Recent = noteDrift(in.Recent, now, done)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("last pass at %s: %d checked of %d instances and %d bindings, %d drifted, %d repairs started, %d could not be checked\n\n%s",
			now.UTC().Format(time.RFC3339), done.Checked, done.Instances, done.Bindings, len(done.Drifted)+done.MoreDrifted, done.Repairs,
			len(done.Failed)+done.MoreFailed, recentDrift(in.Recent)))
	}
	return workflow.NewContinueAsNewError(ctx, DriftChecks, in)
}

// noteDrift puts a pass's findings and failures in front of the recent
// ones, keeping recentChanges.
func noteDrift(recent []string, now time.Time, done activities.DriftPassed) []string {
	at := now.UTC().Format(time.TimeOnly) + " "
	var fresh []string
	for _, f := range done.Drifted {
		fresh = append(fresh, at+f)
	}
	for _, f := range done.Failed {
		fresh = append(fresh, at+"not checked: "+f)
	}
	if more := done.MoreDrifted + done.MoreFailed; more > 0 {
		fresh = append(fresh, fmt.Sprintf("%sand %d more", at, more))
	}
	recent = append(fresh, recent...)
	return recent[:min(len(recent), recentChanges)]
}

func recentDrift(recent []string) string {
	if len(recent) == 0 {
		return "nothing has drifted lately"
	}
	return "latest findings (UTC):\n" + strings.Join(recent, "\n")
}

// RepairResult is what a Repair run did.
type RepairResult struct {
	State osbv1alpha1.OperationState `json:"state"`
	// Repaired is the drift it undid; Skipped why it applied nothing.
	Repaired string `json:"repaired,omitempty"`
	Skipped  string `json:"skipped,omitempty"`
	// Outcome is what it recorded on the instance.
	Outcome string `json:"outcome,omitempty"`
}

// Repair applies a drifted instance's or binding's objects again, under
// its workflow ID, so never beside one of its operations:
//
//  1. read it anew and compare it again: nothing to do if the drift went,
//     or an operation changed it since the check;
//  2. render its templates and apply them, as an update of the same spec
//     and plan (for a binding, its bind again: the same objects, and the
//     same generated passwords, which its registry keeps);
//  3. compare once more and record the outcome on it (condition Drifted,
//     an Event).
func Repair(ctx workflow.Context, t lifecycle.Target) (RepairResult, error) {
	ctx = withPatientRetries(ctx)
	var d *activities.Drift
	var a *activities.Operations

	var scope activities.RepairScope
	if err := workflow.ExecuteLocalActivity(ctx, d.RepairScope, t).Get(ctx, &scope); err != nil {
		return RepairResult{}, err
	}
	if scope.Skipped != "" {
		return RepairResult{State: osbv1alpha1.StateSucceeded, Skipped: scope.Skipped}, nil
	}
	workflow.SetCurrentDetails(ctx, "applying again what drifted: "+scope.Found)
	// A binding's objects come from its bind template; an instance's from
	// its provision template, applied as an update.
	op := lifecycle.OpUpdate
	if t.Kind == lifecycle.KindBinding {
		op = lifecycle.OpBind
	}
	var refs []osbv1alpha1.Source
	applyErr := workflow.ExecuteLocalActivity(ctx, a.ApplyTemplates, t, op).Get(ctx, &refs)
	failure := ""
	if applyErr != nil {
		failure = activities.FailureText(applyErr)
	}
	var outcome string
	if err := workflow.ExecuteLocalActivity(ctx, d.RepairDone, t, scope.Found, failure).Get(ctx, &outcome); err != nil {
		return RepairResult{}, err
	}
	if applyErr != nil {
		return RepairResult{}, applyErr
	}
	return RepairResult{State: osbv1alpha1.StateSucceeded, Repaired: scope.Found, Outcome: outcome}, nil
}
