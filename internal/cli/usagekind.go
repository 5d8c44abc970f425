package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	"github.com/quartermaster/qm/internal/bindingusage"
)

func newUsageKindCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usagekind",
		Short: "Work with UsageKinds, the kinds bindings can be injected into",
	}
	cmd.AddCommand(newUsageKindVerifyCommand(g))
	return cmd
}

func newUsageKindVerifyCommand(g *globals) *cobra.Command {
	var o bindingusage.VerifyOptions
	cmd := &cobra.Command{
		Use:   "verify NAME",
		Short: "Check that bindings can be injected into a UsageKind's workloads",
		Long: `verify is the acceptance test of a UsageKind (Kyma). It checks that its
resource is served; that Quartermaster may get, list, watch and patch it
(RBAC, as the caller or as --service-account); that labelsPath and the
containers path exist in a sample workload; and that the API server accepts
an injection, as a server-side dry run. It prints a checklist and exits
non-zero if a check fails.`,
		Example: `  # As yourself, against any Deployment in namespace apps:
  qm usagekind verify deployment --namespace apps

  # As the worker's service account, against one workload:
  qm usagekind verify function --namespace apps --workload redis-client \
      --service-account quartermaster:qm-worker`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := kubeConfig(g.kubeconfig)
			if err != nil {
				return err
			}
			c, err := crds.NewClient(cfg)
			if err != nil {
				return err
			}
			if o.ServiceAccount != "" {
				// The dry run goes as the service account, so that it
				// meets the admission and RBAC the worker would.
				ns, name, _ := strings.Cut(o.ServiceAccount, ":")
				imp := rest.CopyConfig(cfg)
				imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
				var dry ctrlclient.Client
				if dry, err = crds.NewClient(imp); err != nil {
					return err
				}
				o.DryRun = dry
			}
			checks, err := bindingusage.Verify(cmd.Context(), c, args[0], o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "UsageKind %s\n", args[0])
			for _, c := range checks {
				mark := map[bindingusage.Result]string{bindingusage.Pass: "ok  ", bindingusage.Fail: "FAIL", bindingusage.Skip: "skip"}[c.Result]
				fmt.Fprintf(out, "  %s %-16s %s\n", mark, c.Name, c.Detail)
			}
			if n := bindingusage.Failed(checks); n > 0 {
				return fmt.Errorf("%d of %d checks failed", n, len(checks))
			}
			skipped := 0
			for _, c := range checks {
				if c.Result == bindingusage.Skip {
					skipped++
				}
			}
			if skipped > 0 {
				fmt.Fprintf(out, "%d checks passed, %d skipped\n", len(checks)-skipped, skipped)
			} else {
				fmt.Fprintf(out, "all %d checks passed\n", len(checks))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.Namespace, "namespace", "n", "", "namespace of the sample workload (default: any)")
	f.StringVar(&o.Workload, "workload", "", "name of the sample workload (default: the first of the kind)")
	f.StringVar(&o.ServiceAccount, "service-account", "", "check the RBAC of this service account, namespace:name (default: yours)")
	return cmd
}
