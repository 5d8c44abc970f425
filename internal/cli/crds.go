package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/crdupgrade"
)

func newCRDsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "crds",
		Short: "Work with Quartermaster's CustomResourceDefinitions",
	}
	cmd.AddCommand(newCRDsApplyCommand(g))
	return cmd
}

func newCRDsApplyCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "apply",
		Short: "Install or upgrade this release's CustomResourceDefinitions, forward only",
		Long: `apply installs the CustomResourceDefinitions this qm was built with, or
upgrades the installed ones to them, by server-side apply; the chart runs it
in a hook Job before every install, upgrade and rollback, as Helm never
changes a chart's crds/. An installed definition is replaced only when this
release's keeps every version it serves or stores and every field of its
schemas: after a rollback, the older release leaves the newer definitions in
place, so that the fields the newer release wrote are not pruned. It prints
what it did with each definition.`,
		Example: `  qm crds apply --kubeconfig ~/.kube/config`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kubeConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			c, err := crds.NewClient(cfg)
			if err != nil {
				return err
			}
			defs, err := crds.Definitions()
			if err != nil {
				return err
			}
			results, err := crdupgrade.Apply(cmd.Context(), c, defs)
			out := cmd.OutOrStdout()
			for _, r := range results {
				verb := "applied"
				if !r.Apply {
					verb = "kept the installed"
				}
				fmt.Fprintf(out, "%s %s: %s\n", verb, r.Name, r.Reason)
			}
			return err
		},
	}
}
