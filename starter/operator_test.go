package starter_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/lifecycle"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// TestRunsEndAsTheirOperations is what an operator reads in the Temporal
// UI: a failed operation is a failed run whose message is the description
// kubectl shows and whose type says what kind of failure it was;
// QmState="failed" lists the failures; a success returns its result; and
// every run carries a summary with names and details that lead back to its
// resource.
func TestRunsEndAsTheirOperations(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	failures := map[string]struct{ plan, kind string }{
		"tpl":     {s.Plan("broken", "", testenv.Templates("broken")), "TemplateError"},
		"refused": {s.Plan("refused", "", testenv.Templates("refused")), "ApplyError"},
		"lost":    {"no-such-plan", "PlanError"},
	}
	for name, f := range failures {
		s.Instance(name, f.plan, "")
	}
	instant := s.Plan("instant", "", testenv.Templates("instant"))
	s.Instance("fine", instant, "")

	runOf := func(name string) (string, string) {
		id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: name})
		return id, s.ClosedRun(id, runs.WorkflowType(lifecycle.OpProvision))
	}
	for name, f := range failures {
		inst := s.WaitInstance(name, "failed", func(i *osbv1alpha1.SFServiceInstance) bool { return i.Status.State == osbv1alpha1.StateFailed })
		id, runID := runOf(name)
		desc, err := s.Temporal.DescribeWorkflow(ctx, id, runID)
		require.NoError(t, err)
		assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_FAILED, desc.Status, "%s: a failed provision is a failed run", name)
		err = s.Temporal.GetWorkflow(ctx, id, runID).Get(ctx, nil)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr, name)
		assert.Equal(t, f.kind, appErr.Type(), name)
		assert.Equal(t, inst.Status.Description, appErr.Message(), "%s: the run's failure is what kubectl shows", name)
		if name == "lost" {
			recorded(t, s.History(id, runID), "begin-failure")
		}
	}

	// QmState="failed" lists exactly the failures.
	query := fmt.Sprintf("QmNamespace = %q AND QmState = %q", s.Namespace, "failed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(c, err)
		var names []string
		for _, e := range resp.Executions {
			names = append(names, e.Execution.WorkflowId)
		}
		assert.ElementsMatch(c, []string{
			"sfserviceinstance/" + s.Namespace + "/tpl",
			"sfserviceinstance/" + s.Namespace + "/refused",
			"sfserviceinstance/" + s.Namespace + "/lost",
		}, names)
	}, 30*time.Second, 200*time.Millisecond, "QmState finds the failed runs")

	// A success returns its result, and its run says what it is about.
	s.WaitInstance("fine", "provisioned", testenv.Succeeded(1))
	id, runID := runOf("fine")
	var res workflows.Result
	require.NoError(t, s.Temporal.GetWorkflow(ctx, id, runID).Get(ctx, &res))
	assert.Equal(t, osbv1alpha1.StateSucceeded, res.State)
	require.Len(t, res.Resources, 1)
	assert.Equal(t, "ConfigMap", res.Resources[0].Kind)
	desc, err := s.Temporal.DescribeWorkflow(ctx, id, runID)
	require.NoError(t, err)
	summary, err := desc.GetStaticSummary()
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("provision %s/fine: plan instant (%s)", s.Namespace, s.Namespace), summary)
	details, err := desc.GetStaticDetails()
	require.NoError(t, err)
	assert.Contains(t, details, "- instance ID: `fine`")
	assert.Contains(t, details, "- plan: instant (`"+instant+"`)")
	assert.Contains(t, details, "`kubectl get sfserviceinstance fine -n "+s.Namespace+"`")

	// A run that waits says what it waits for.
	gated := s.Plan("gated", "", testenv.Templates("gated"))
	s.Instance("slow", gated, "")
	slowID := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "slow"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := s.Temporal.QueryWorkflow(ctx, slowID, "", "__temporal_workflow_metadata")
		require.NoError(c, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(c, v.Get(&md))
		assert.Equal(c, `waiting for the provision status: in progress, "waiting for the gate"`, md.GetCurrentDetails())
	}, 30*time.Second, 200*time.Millisecond, "the current details of a waiting run")
	s.OpenGate("slow", "gate")
	s.WaitInstance("slow", "provisioned", testenv.Succeeded(1))
}

// TestRetriesShow: an apply that keeps meeting an error that may pass (its
// namespace does not exist yet) is retried where an operator and a kubectl
// user see it, and fails at the plan's deadline if the error never passes.
func TestRetriesShow(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, Worker: true, Watcher: true})
	ctx := context.Background()
	later := s.Namespace + "-later"
	template := func(ns string) string {
		return `  - action: provision
    type: gotemplate
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: {{ .instance.metadata.name }}, namespace: ` + ns + `}`
	}
	waits := s.Plan("waits", "  maximum_polling_duration: 120\n", template(later))
	never := s.Plan("never", "  maximum_polling_duration: 6\n", template(s.Namespace+"-never"))
	s.Instance("patient", waits, "")
	s.Instance("hopeless", never, "")

	retrying := regexp.MustCompile(fmt.Sprintf(`^retrying apply \(attempt \d+ failed\): applying ConfigMap %s/patient: namespaces "%s" not found$`, later, later))
	id := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "patient"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		inst, err := s.GetInstance("patient")
		require.NoError(c, err)
		assert.Equal(c, osbv1alpha1.StateInProgress, inst.Status.State)
		assert.Regexp(c, retrying, inst.Status.Description, "kubectl shows the retry")

		v, err := s.Temporal.QueryWorkflow(ctx, id, "", "__temporal_workflow_metadata")
		require.NoError(c, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(c, v.Get(&md))
		assert.Regexp(c, retrying, md.GetCurrentDetails(), "the run's current details show the retry")
	}, 60*time.Second, 200*time.Millisecond)

	// The error passes: the next attempt applies, and the operation succeeds.
	s.Create(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "` + later + `"}}`)
	s.WaitInstance("patient", "provisioned once the namespace exists", testenv.Succeeded(1))
	recorded(t, s.History(id, s.ClosedRun(id, runs.WorkflowType(lifecycle.OpProvision))), "apply-retried")

	inst := s.WaitInstance("hopeless", "failed at its deadline", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	assert.Contains(t, inst.Status.Description, "provision failed: apply kept failing until the plan's maximum_polling_duration ran out")
	assert.Contains(t, inst.Status.Description, fmt.Sprintf(`namespaces "%s-never" not found`, s.Namespace))
	hopeless := runs.WorkflowID(lifecycle.Target{Kind: lifecycle.KindInstance, Namespace: s.Namespace, Name: "hopeless"})
	err := s.Temporal.GetWorkflow(ctx, hopeless, "").Get(ctx, nil)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, workflows.KindRetriesExhausted, appErr.Type())
	recorded(t, s.History(hopeless, ""), "retries-exhausted")
}
