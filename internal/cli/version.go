package cli

import (
	"cmp"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and revision are stamped at build time (-ldflags -X, as `make
// build` and `make image` do) with the same values as the image's labels.
// Unstamped, qm reports what the Go toolchain recorded: the module's
// version and the VCS revision of the checkout it was built in.
var version, revision string

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and revision of qm, and of the libraries it was built with",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				fmt.Fprintf(cmd.OutOrStdout(), "qm %s (revision %s; no build information)\n", cmp.Or(version, "unknown"), cmp.Or(revision, "unknown"))
				return
			}
			fmt.Fprintf(cmd.OutOrStdout(), "qm %s (revision %s; %s)\n", cmp.Or(version, info.Main.Version),
				cmp.Or(revision, vcsRevision(info), "unknown"), info.GoVersion)
			for _, dep := range info.Deps {
				switch dep.Path {
				case "go.temporal.io/sdk", "sigs.k8s.io/controller-runtime", "k8s.io/client-go":
					fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", dep.Path, dep.Version)
				}
			}
		},
	}
}

// vcsRevision is the commit the Go toolchain recorded, with "-dirty" when
// the checkout had changes.
func vcsRevision(info *debug.BuildInfo) string {
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
