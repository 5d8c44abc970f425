package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/devenv"
	"github.com/quartermaster/qm/internal/massupdate"
)

// adminClient is `qm mass-update`'s api.AdminClient: given no credentials,
// it uses those qm dev keeps under dataDir.
type adminClient struct {
	api.AdminClient
	dataDir string
	// caFile and serverName verify an admin API served over HTTPS with a
	// certificate of a private CA, reached under another name (a
	// port-forward's 127.0.0.1).
	caFile, serverName string
}

// client returns the api.AdminClient with its credentials settled.
func (a *adminClient) client() (*api.AdminClient, error) {
	if a.HTTP == nil && (a.caFile != "" || a.serverName != "") {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName}
		if a.caFile != "" {
			pem, err := os.ReadFile(a.caFile)
			if err != nil {
				return nil, fmt.Errorf("reading the admin API's CA: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s holds no PEM certificate", a.caFile)
			}
		}
		a.HTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	if a.Credentials.Username == "" || a.Credentials.Password == "" {
		saved, ok, err := devenv.SavedAdminCredentials(a.dataDir)
		if err != nil {
			return nil, err
		}
		if ok {
			a.Credentials = saved
		}
	}
	return &a.AdminClient, nil
}

// explain adds what an operator can do about a refusal of the credentials.
func explain(err error) error {
	var refused *api.AdminError
	if errors.As(err, &refused) && refused.StatusCode == http.StatusUnauthorized {
		refused.Description = "the admin API refused the credentials: set --username/--password or QM_ADMIN_USERNAME/QM_ADMIN_PASSWORD (qm dev prints them)"
	}
	return err
}

// call runs one request of the admin client.
func (a *adminClient) call(do func(c *api.AdminClient) error) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	return explain(do(c))
}

func newMassUpdateCommand() *cobra.Command {
	a := &adminClient{}
	cmd := &cobra.Command{
		Use:   "mass-update",
		Short: "Update many instances at once, steerably: start, status, list, pause, resume, cancel",
		Long: `mass-update drives the admin API's mass updates: a run updates every instance a
selector selects through the instance's own Update, a few at a time, and can be
paused, resumed and cancelled while it runs. Instances already rendered from
their plan's generation are skipped. Follow a run here or in the Temporal UI
(workflow massupdate/<name>).`,
		Example: `  # Everything of one plan, 20 at a time, pausing after 5 failures; follow it:
  qm mass-update start --plan 8a1e4c6f-2b3d-4e5f-9a7b-1c2d3e4f5a61 --concurrency 20 --max-failures 5 --wait

  # What would a service-wide run update?
  qm mass-update start --service 3d7c2b9a-8f1e-4b6d-9c3a-5e2f1a0b7c42 --dry-run

  # Steer a run:
  qm mass-update pause manual-20261123-031500
  qm mass-update status manual-20261123-031500 --watch`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&a.URL, "url", envOr("QM_API_URL", "http://127.0.0.1:8081"), "URL of the admin API (env QM_API_URL)")
	pf.StringVar(&a.Credentials.Username, "username", os.Getenv("QM_ADMIN_USERNAME"), "admin API user (env QM_ADMIN_USERNAME)")
	pf.StringVar(&a.Credentials.Password, "password", os.Getenv("QM_ADMIN_PASSWORD"), "admin API password (env QM_ADMIN_PASSWORD; prefer the environment)")
	pf.StringVar(&a.dataDir, "data-dir", ".qm", "where qm dev keeps the credentials it prints, used when none are given")
	pf.StringVar(&a.caFile, "ca-file", os.Getenv("QM_API_CA_FILE"), "PEM CAs that verify an admin API served over HTTPS (env QM_API_CA_FILE; default: the system's)")
	pf.StringVar(&a.serverName, "tls-server-name", os.Getenv("QM_API_TLS_SERVER_NAME"), "name to verify in the admin API's certificate, when the URL's host is another (a port-forward) (env QM_API_TLS_SERVER_NAME)")
	cmd.AddCommand(newMassStartCommand(a), newMassStatusCommand(a), newMassListCommand(a))
	for _, action := range []string{massupdate.Pause, massupdate.Resume, massupdate.Cancel} {
		cmd.AddCommand(&cobra.Command{
			Use:   action + " NAME",
			Short: strings.ToUpper(action[:1]) + action[1:] + " a running mass update",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := a.call(func(c *api.AdminClient) error { return c.SteerMassUpdate(cmd.Context(), args[0], action) }); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s asked\n", args[0], action)
				return nil
			},
		})
	}
	return cmd
}

func newMassStartCommand(a *adminClient) *cobra.Command {
	var req api.MassUpdateRequest
	var wait bool
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a mass update (or, with --dry-run, list what it would update)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if req.DryRun {
				var dry api.MassUpdateDryRun
				if err := a.call(func(c *api.AdminClient) (err error) { dry, err = c.DryRun(cmd.Context(), req); return err }); err != nil {
					return err
				}
				for _, name := range dry.Instances {
					fmt.Fprintln(out, name)
				}
				fmt.Fprintf(out, "would update %d of %d instances (%d current already); nothing was changed\n", len(dry.Instances), dry.Total, dry.Skipped)
				return nil
			}
			var started api.MassUpdateStarted
			if err := a.call(func(c *api.AdminClient) (err error) { started, err = c.StartMassUpdate(cmd.Context(), req); return err }); err != nil {
				return err
			}
			fmt.Fprintf(out, "started mass update %s (workflow massupdate/%s)\n", started.Name, started.Name)
			if !wait {
				return nil
			}
			return follow(cmd, a, started.Name)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "name of the run (default: manual-<time>)")
	f.StringSliceVar(&req.PlanIDs, "plan", nil, "the instances of this plan (OSB plan ID; repeatable)")
	f.StringVar(&req.ServiceID, "service", "", "the instances of this service (OSB service ID)")
	f.StringVar(&req.Namespace, "namespace", "", "the instances in this namespace")
	f.StringVar(&req.Labels, "selector", "", "the instances with these labels (a label selector)")
	f.BoolVar(&req.All, "all", false, "every instance")
	f.IntVar(&req.Concurrency, "concurrency", 0, "most updates in flight (default 10)")
	f.Float64Var(&req.Rate, "rate", 0, "most updates started per second (default: no limit)")
	f.IntVar(&req.Canary, "canary", 0, "update this many first, then pause")
	f.StringVar(&req.MaxFailures, "max-failures", "", `pause after this many failures: a count ("5") or a percentage ("10%")`)
	f.BoolVar(&req.DryRun, "dry-run", false, "list what would be updated, and change nothing")
	f.BoolVar(&wait, "wait", false, "follow the run until it ends; non-zero exit if updates failed")
	return cmd
}

func newMassStatusCommand(a *adminClient) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a mass update's progress",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return follow(cmd, a, args[0])
			}
			run, err := runOf(cmd.Context(), a, args[0])
			if err != nil {
				return err
			}
			out, p := cmd.OutOrStdout(), *run.Progress
			fmt.Fprintf(out, "%s (%s): %s\n", args[0], run.Status, p.Line())
			if run.StartedBy != "" {
				fmt.Fprintf(out, "  started by %s at %s\n", run.StartedBy, run.StartTime.Local().Format(time.DateTime))
			}
			for _, s := range p.Steered {
				fmt.Fprintf(out, "  %s by %s at %s\n", s.Action, cmp.Or(s.By, "someone unknown"), s.At.Local().Format(time.DateTime))
			}
			printFailures(out, p)
			return exitFor(p)
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "follow the run until it ends")
	return cmd
}

func newMassListCommand(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the mass updates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []api.MassUpdateRun
			if err := a.call(func(c *api.AdminClient) (err error) { list, err = c.MassUpdates(cmd.Context()); return err }); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%-40s %-12s %s\n", "NAME", "STATUS", "STARTED")
			for _, r := range list {
				fmt.Fprintf(out, "%-40s %-12s %s\n", r.Name, r.Status, r.StartTime.Local().Format(time.DateTime))
			}
			return nil
		},
	}
}

// progressOf asks the admin API for a run's progress and status.
func progressOf(ctx context.Context, a *adminClient, name string) (massupdate.Progress, string, error) {
	run, err := runOf(ctx, a, name)
	if err != nil {
		return massupdate.Progress{}, "", err
	}
	return *run.Progress, run.Status, nil
}

// runOf asks the admin API for a run, with its progress.
func runOf(ctx context.Context, a *adminClient, name string) (api.MassUpdateRun, error) {
	var run api.MassUpdateRun
	err := a.call(func(c *api.AdminClient) (err error) { run, err = c.MassUpdate(ctx, name); return err })
	return run, err
}

// follow shows a run's progress until it ends: a bar on a terminal, a line
// per change on a pipe.
func follow(cmd *cobra.Command, a *adminClient, name string) error {
	out := cmd.OutOrStdout()
	f, isFile := out.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	last := ""
	for {
		p, status, err := progressOf(cmd.Context(), a, name)
		if err != nil {
			return err
		}
		line := p.Line()
		switch {
		case tty:
			fmt.Fprintf(out, "\r\033[K%s %s", bar(p, 30), line)
		case line != last:
			fmt.Fprintln(out, line)
		}
		last = line
		if status != "running" {
			if tty {
				fmt.Fprintln(out)
			}
			printFailures(out, p)
			return exitFor(p)
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// bar draws the share of the instances done.
func bar(p massupdate.Progress, width int) string {
	done := width
	if p.Total > 0 {
		done = p.Done() * width / p.Total
	}
	return "[" + strings.Repeat("#", done) + strings.Repeat(".", width-done) + "]"
}

func printFailures(out io.Writer, p massupdate.Progress) {
	for _, f := range p.Failures {
		fmt.Fprintf(out, "  failed %s: %s\n", f.Instance, f.Description)
	}
}

// exitFor makes a run that ended with failures a non-zero exit.
func exitFor(p massupdate.Progress) error {
	if p.Failed > 0 && p.State != massupdate.Running {
		return fmt.Errorf("%d updates failed", p.Failed)
	}
	return nil
}
