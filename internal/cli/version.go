package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of qm and of the libraries it was built with",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				fmt.Fprintln(cmd.OutOrStdout(), "qm (no build information)")
				return
			}
			fmt.Fprintf(cmd.OutOrStdout(), "qm %s (%s)\n", info.Main.Version, info.GoVersion)
			for _, dep := range info.Deps {
				switch dep.Path {
				case "go.temporal.io/sdk", "sigs.k8s.io/controller-runtime", "k8s.io/client-go":
					fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", dep.Path, dep.Version)
				}
			}
		},
	}
}
