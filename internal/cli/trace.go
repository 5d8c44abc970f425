package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/trace"
	"github.com/quartermaster/qm/workflows"
)

func newTraceCommand(g *globals) *cobra.Command {
	var namespace, output string
	cmd := &cobra.Command{
		Use:   "trace (sfserviceinstance|sfservicebinding)/NAME",
		Short: "Show an instance or binding and everything that hangs off it, with its latest runs and why they failed",
		Long: `trace reads an SFServiceInstance or SFServiceBinding, its bindings and
their successors, the ServiceBindingUsages and ServiceBindings that inject
them, the ServiceClaims that hold it, the objects its templates applied
with their live state, and for each instance and binding its latest runs
in Temporal, with the whole message of an operation that failed. It only
reads, from the API server and from Temporal.`,
		Example: `  qm trace sfserviceinstance/orders-db -n shop
  qm trace sfsi/orders-db -n shop -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || name == "" {
				return fmt.Errorf("%q: give kind/name, as sfserviceinstance/orders-db", args[0])
			}
			if output != "" && output != "json" {
				return fmt.Errorf(`-o %q: only "json"`, output)
			}
			cfg, err := kubeConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			kube, err := crds.NewClient(cfg)
			if err != nil {
				return err
			}
			tc, _, err := g.temporal(cmd.Context())
			if err != nil {
				return err
			}
			defer tc.Close()
			t := &trace.Tracer{Kube: kube, Runs: temporalRuns{tc}}
			var root trace.Node
			switch strings.ToLower(kind) {
			case "sfserviceinstance", "sfserviceinstances", "sfsi":
				root, err = t.Instance(cmd.Context(), namespace, name)
			case "sfservicebinding", "sfservicebindings", "sfsb":
				root, err = t.Binding(cmd.Context(), namespace, name)
			default:
				return fmt.Errorf("%q: trace follows sfserviceinstance and sfservicebinding", kind)
			}
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(root)
			}
			trace.Text(cmd.OutOrStdout(), root, time.Now())
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "namespace of the resource")
	cmd.Flags().StringVarP(&output, "output", "o", "", `"json" for the trace as JSON`)
	return cmd
}

// temporalRuns reads runs from Temporal for trace.
type temporalRuns struct{ c client.Client }

// Latest lists the runs of id, newest first, with the whole message of a
// run that failed, or of an operation that ended failed.
func (r temporalRuns) Latest(ctx context.Context, id string, n int) ([]trace.Run, error) {
	resp, err := r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", id), PageSize: 50})
	if err != nil {
		return nil, fmt.Errorf("listing the runs of %s: %w", id, err)
	}
	execs := resp.GetExecutions()
	slices.SortFunc(execs, func(a, b *workflowpb.WorkflowExecutionInfo) int {
		return b.GetStartTime().AsTime().Compare(a.GetStartTime().AsTime())
	})
	var out []trace.Run
	for _, e := range execs[:min(n, len(execs))] {
		run := trace.Run{WorkflowID: id, RunID: e.GetExecution().GetRunId(), Type: e.GetType().GetName(),
			Status: strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"), Started: e.GetStartTime().AsTime()}
		run.Failure = r.failure(ctx, id, run.RunID, e.GetStatus())
		out = append(out, run)
	}
	return out, nil
}

// failure is what a closed run says went wrong: the failure of a run that
// failed, or the description of an operation whose result is failed.
func (r temporalRuns) failure(ctx context.Context, id, runID string, status enumspb.WorkflowExecutionStatus) string {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		var res workflows.Result
		if err := r.c.GetWorkflow(ctx, id, runID).Get(ctx, &res); err != nil || res.State != "failed" {
			return ""
		}
		return res.Description
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		if err := r.c.GetWorkflow(ctx, id, runID).Get(ctx, nil); err != nil {
			return err.Error()
		}
	}
	return ""
}
