package cli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/worker"
)

// defaultDeployment names the worker deployment when neither the flag nor
// QM_WORKER_DEPLOYMENT does; the chart names it after the release.
const defaultDeployment = "quartermaster"

func deploymentFlag(f *pflag.FlagSet, to *string) {
	f.StringVar(to, "deployment-name", envOr("QM_WORKER_DEPLOYMENT", defaultDeployment),
		"the Temporal worker deployment the workers' builds belong to (env QM_WORKER_DEPLOYMENT)")
}

func newBuildsCommand(g *globals) *cobra.Command {
	var deployment string
	cmd := &cobra.Command{
		Use:   "builds",
		Short: "List the workers' builds Temporal routes runs to (Worker Versioning), and route by hand",
		Long: `Each release's workers are one build (version) of the worker deployment.
Temporal starts new runs, and moves the never-ending ones at their next task,
on the current build (and a ramping one's share); a run that ends is pinned
to the build that started it. Workers of a newer chart revision make their
build current as they start; these commands route by hand (see
docs/upgrades.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, opts, err := g.temporal(cmd.Context())
			if err != nil {
				return err
			}
			defer tc.Close()
			builds, unversioned, err := worker.Builds(cmd.Context(), tc, deployment, opts.DataConverter)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BUILD\tROUTING\tPINNED RUNS\tREVISION\tCREATED")
			for _, b := range builds {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", b.ID, dash(b.Routing), b.Pinned, b.Revision, b.Created.UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(w, "(unversioned)\t%s\t\t\t\n", dash(unversioned))
			return w.Flush()
		},
	}
	deploymentFlag(cmd.PersistentFlags(), &deployment)
	var unversioned bool
	var wait time.Duration
	current := &cobra.Command{
		Use:   "current BUILD | --unversioned",
		Short: "Make a build current: new runs and the never-ending ones go to its workers (a rollback is this too)",
		Args: func(_ *cobra.Command, args []string) error {
			if unversioned == (len(args) == 1) || len(args) > 1 {
				return fmt.Errorf("name one build, or --unversioned")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, opts, err := g.temporal(cmd.Context())
			if err != nil {
				return err
			}
			defer tc.Close()
			build := ""
			if !unversioned {
				build = args[0]
			}
			if wait > 0 && build != "" {
				ctx, cancel := context.WithTimeout(cmd.Context(), wait)
				defer cancel()
				err = worker.MakeCurrent(ctx, tc, worker.Versioning{Deployment: deployment, Namespace: opts.Namespace, BuildID: build, Payloads: opts.DataConverter})
			} else {
				_, err = tc.WorkerDeploymentClient().GetHandle(deployment).SetCurrentVersion(cmd.Context(),
					client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
				if err == nil && wait > 0 {
					ctx, cancel := context.WithTimeout(cmd.Context(), wait)
					defer cancel()
					err = worker.AwaitRouted(ctx, tc, worker.Versioning{Deployment: deployment, Namespace: opts.Namespace, Payloads: opts.DataConverter})
				}
			}
			if err != nil {
				return fmt.Errorf("making %s current: %w", buildName(build), err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s routes to %s\n", deployment, buildName(build))
			return nil
		},
	}
	current.Flags().BoolVar(&unversioned, "unversioned", false, "route to the unversioned workers (a rollback to a release before Worker Versioning)")
	current.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the build's workers to poll first (the chart's rollback hook), and for the task queues to route as set")
	ramp := &cobra.Command{
		Use:   "ramp BUILD PERCENT",
		Short: "Send a share of new runs and never-ending ones to a build besides the current one (0 ends the ramp)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pct, err := strconv.ParseFloat(args[1], 32)
			if err != nil || pct < 0 || pct > 100 {
				return fmt.Errorf("PERCENT %q: a number from 0 to 100", args[1])
			}
			tc, _, err := g.temporal(cmd.Context())
			if err != nil {
				return err
			}
			defer tc.Close()
			build := args[0]
			if pct == 0 {
				build = "" // no ramp
			}
			_, err = tc.WorkerDeploymentClient().GetHandle(deployment).SetRampingVersion(cmd.Context(),
				client.WorkerDeploymentSetRampingVersionOptions{BuildID: build, Percentage: float32(pct)})
			if err != nil {
				return fmt.Errorf("ramping %s to %g%%: %w", args[0], pct, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s routes %g%% to build %s\n", deployment, pct, args[0])
			return nil
		},
	}
	cmd.AddCommand(current, ramp)
	return cmd
}

func buildName(build string) string {
	if build == "" {
		return "the unversioned workers"
	}
	return "build " + build
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
