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
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows/runs"
)

// startMassUpdate changes the plan planID (a new generation) and starts
// the mass update name of its instances, upgradeMassConcurrency at a time; it
// returns the plan's new generation.
func startMassUpdate(t *testing.T, s *testenv.System, planID, name string) int64 {
	t.Helper()
	ctx := context.Background()
	var plans osbv1alpha1.SFPlanList
	require.NoError(t, s.Kube.Client.List(ctx, &plans, ctrlclient.InNamespace(s.Namespace)))
	i := slices.IndexFunc(plans.Items, func(p osbv1alpha1.SFPlan) bool { return p.Spec.ID == planID })
	require.GreaterOrEqual(t, i, 0, "plan %s", planID)
	plan := &plans.Items[i]
	plan.Spec.Description = "changed before " + name
	require.NoError(t, s.Kube.Client.Update(ctx, plan))
	_, err := s.Temporal.ExecuteWorkflow(ctx, runs.MassUpdateOptions(name, planID, "mass update "+name, "the upgrade test"), runs.MassUpdateType,
		massupdate.Request{Name: name, Selector: massupdate.Selector{PlanIDs: []string{planID}}, Concurrency: upgradeMassConcurrency})
	require.NoError(t, err, "starting mass update %s", name)
	return plan.Generation
}

// checkMassUpdate waits until the mass update name ends, and checks that
// it updated every instance it selected, none failed, and each instance of
// the plan planID is at generation gen or a later one.
func checkMassUpdate(t *testing.T, s *testenv.System, planID, name string, gen int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress massupdate.Progress
	if err := s.Temporal.GetWorkflow(ctx, runs.MassUpdateID(name), "").Get(ctx, &progress); err != nil {
		require.NoError(t, err, "mass update %s: %s", name, massUpdateStuck(s, planID, name, gen))
	}
	t.Logf("mass update %s: %d selected, %d updated, %d failed, %d current already; %.1f updates a second", name, progress.Total, progress.Succeeded,
		progress.Failed, progress.Skipped, progress.Rate)
	assert.Zero(t, progress.Failed, "%s: %v", name, progress.Failures)
	assert.Positive(t, progress.Succeeded)
	assert.Equal(t, progress.Total, progress.Succeeded+progress.Skipped, name)
	var list osbv1alpha1.SFServiceInstanceList
	require.NoError(t, s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)))
	for _, inst := range list.Items {
		if inst.Spec.PlanID == planID {
			assert.GreaterOrEqual(t, inst.Status.AppliedPlanGeneration, gen, "%s is at the plan's generation %d", inst.Name, gen)
		}
	}
}

// massUpdateStuck says what a mass update that did not end in time was
// waiting for, for the failure's message: its progress, its pending
// activities (the batches of updates) with their last failures, and the
// instances of the plan not yet at generation gen with their status.
func massUpdateStuck(s *testenv.System, planID, name string, gen int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	if v, err := s.Temporal.QueryWorkflow(ctx, runs.MassUpdateID(name), "", runs.QueryProgress); err != nil {
		out = append(out, "progress: "+err.Error())
	} else {
		var p massupdate.Progress
		if err := v.Get(&p); err != nil {
			out = append(out, "progress: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("progress: %s %q, %d of %d done (%d failed, %d skipped), %d in flight, %d remaining",
				p.State, p.Reason, p.Succeeded+p.Failed, p.Total, p.Failed, p.Skipped, p.InFlight, p.Remaining))
		}
	}
	if d, err := s.Temporal.DescribeWorkflowExecution(ctx, runs.MassUpdateID(name), ""); err != nil {
		out = append(out, "describe: "+err.Error())
	} else {
		for _, a := range d.GetPendingActivities() {
			out = append(out, fmt.Sprintf("activity %s: %s, attempt %d, last failure %q", a.GetActivityType().GetName(), a.GetState(),
				a.GetAttempt(), a.GetLastFailure().GetMessage()))
		}
	}
	var list osbv1alpha1.SFServiceInstanceList
	if err := s.Kube.Client.List(ctx, &list, ctrlclient.InNamespace(s.Namespace)); err != nil {
		out = append(out, "instances: "+err.Error())
	}
	behind := 0
	for _, inst := range list.Items {
		if inst.Spec.PlanID != planID || inst.Status.AppliedPlanGeneration >= gen {
			continue
		}
		if behind++; behind <= 3 {
			out = append(out, fmt.Sprintf("%s at plan generation %d: %s %q; its workflow ID: %s", inst.Name, inst.Status.AppliedPlanGeneration,
				inst.Status.State, inst.Status.Description, runHolding(ctx, s, inst)))
		}
	}
	out = append(out, fmt.Sprintf("%d instances behind generation %d", behind, gen))
	return strings.Join(out, "; ")
}

// runHolding says what the latest run under inst's workflow ID is: its
// type, status, start, pending workflow task and versioning, which say
// whether the instance is busy with another operation.
func runHolding(ctx context.Context, s *testenv.System, inst osbv1alpha1.SFServiceInstance) string {
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: inst.Namespace, Name: inst.Name})
	d, err := s.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return err.Error()
	}
	info := d.GetWorkflowExecutionInfo()
	return fmt.Sprintf("%s %s, started %s (pending workflow task %s, attempt %d; versioning %v; pending activities %d)",
		info.GetType().GetName(), info.GetStatus(), info.GetStartTime().AsTime().Format(time.TimeOnly),
		d.GetPendingWorkflowTask().GetState(), d.GetPendingWorkflowTask().GetAttempt(), info.GetVersioningInfo(), len(d.GetPendingActivities()))
}
