package cli

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/system"
)

func newAPICommand(g *globals) *cobra.Command {
	var listen, adminListen, metricsAddr string
	var tlsFiles api.TLS
	srv := &api.Server{
		OSB:   api.Credentials{Username: os.Getenv("QM_OSB_USERNAME"), Password: os.Getenv("QM_OSB_PASSWORD")},
		Admin: api.Credentials{Username: os.Getenv("QM_ADMIN_USERNAME"), Password: os.Getenv("QM_ADMIN_PASSWORD")},
	}
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the OSB v2 and admin HTTP API (stateless, active-active)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case tlsFiles.CertFile != "" || tlsFiles.KeyFile != "":
				srv.TLS = &tlsFiles
			case tlsFiles.ClientCAFile != "":
				return errors.New("--tls-client-ca-file needs HTTPS: set --tls-cert-file and --tls-key-file too")
			}
			ls, err := apiListeners(listen, adminListen, metricsAddr, srv.AdminEnabled())
			if err != nil {
				return err
			}
			g.logger.Info("serving the API", "address", ls.OSB.Addr().String(), "namespace", srv.Namespace,
				"admin", addrOf(ls.Admin), "metrics", addrOf(ls.Metrics), "https", srv.TLS != nil, "clientCertificates", tlsFiles.ClientCAFile != "")
			srv.Logger = g.logger
			// Temporal serves the admin API's mass updates; without it the
			// OSB API still runs. A configuration that is there but cannot
			// be read is an error, not a reason to run without.
			_, err = g.temporalOptions()
			if err != nil && !errors.Is(err, errNoTemporal) {
				return err
			}
			return g.run(cmd.Context(), err == nil, system.Options{API: srv, APIListeners: ls})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":8080", "listen address of the OSB API")
	f.StringVar(&adminListen, "admin-listen", envOr("QM_ADMIN_LISTEN", ":8081"), "listen address of the admin API, served only with admin credentials; 0 serves none (env QM_ADMIN_LISTEN)")
	f.StringVar(&metricsAddr, "metrics-addr", envOr("QM_API_METRICS_ADDR", ":9092"), "address serving Prometheus /metrics (the requests' and the running mass updates'); 0 turns it off (env QM_API_METRICS_ADDR)")
	f.StringVar(&srv.Namespace, "namespace", envOr("QM_NAMESPACE", "default"), "namespace whose SFServices and SFPlans are the catalog, and where OSB requests create instances and bindings (env QM_NAMESPACE)")
	f.StringVar(&srv.OSB.Username, "osb-username", srv.OSB.Username, "username OSB clients present (env QM_OSB_USERNAME)")
	f.StringVar(&srv.OSB.Password, "osb-password", srv.OSB.Password, "password OSB clients present (env QM_OSB_PASSWORD; prefer the environment: flags show in ps)")
	f.StringVar(&srv.Admin.Username, "admin-username", srv.Admin.Username, "username of the admin API (env QM_ADMIN_USERNAME; no credentials turn the admin API off)")
	f.StringVar(&srv.Admin.Password, "admin-password", srv.Admin.Password, "password of the admin API (env QM_ADMIN_PASSWORD)")
	f.DurationVar(&srv.SyncTimeout, "sync-timeout", api.DefaultSyncTimeout, "how long a synchronous provision, update or deprovision may take before the reply")
	f.DurationVar(&srv.BindTimeout, "bind-timeout", api.DefaultBindTimeout, "how long a synchronous bind or unbind may take before the reply")
	f.IntVar(&srv.Limits.InstancesPerOrganization, "max-instances-per-organization", 0, "most instances an OSB organization (a Kubernetes platform's context namespace, else organization_guid) may have; 0: no limit")
	f.Int64Var(&srv.MaxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body accepted (413 beyond)")
	f.StringVar(&tlsFiles.CertFile, "tls-cert-file", os.Getenv("QM_TLS_CERT_FILE"), "serve HTTPS with this PEM certificate (read again when it changes; env QM_TLS_CERT_FILE)")
	f.StringVar(&tlsFiles.KeyFile, "tls-key-file", os.Getenv("QM_TLS_KEY_FILE"), "the certificate's PEM key (env QM_TLS_KEY_FILE)")
	f.StringVar(&tlsFiles.ClientCAFile, "tls-client-ca-file", os.Getenv("QM_TLS_CLIENT_CA_FILE"), "accept OSB clients with a certificate from these PEM CAs instead of basic auth (env QM_TLS_CLIENT_CA_FILE)")
	return cmd
}

// apiListeners opens the API's listeners: the OSB API's; the admin API's
// when it has credentials and an address; the metrics' when they have an
// address ("0" is none, as for the other components).
func apiListeners(listen, adminListen, metricsAddr string, admin bool) (api.Listeners, error) {
	var ls api.Listeners
	open := func(addr, what string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s for %s: %w", addr, what, err)
		}
		return ln, nil
	}
	var err error
	if ls.OSB, err = open(listen, "the OSB API"); err != nil {
		return ls, err
	}
	if admin && adminListen != "0" && adminListen != "" {
		if ls.Admin, err = open(adminListen, "the admin API"); err != nil {
			_ = ls.OSB.Close()
			return ls, err
		}
	}
	if metricsAddr != "0" && metricsAddr != "" {
		if ls.Metrics, err = open(metricsAddr, "the API's metrics"); err != nil {
			_ = ls.OSB.Close()
			if ls.Admin != nil {
				_ = ls.Admin.Close()
			}
			return ls, err
		}
	}
	return ls, nil
}

// addrOf is where ln listens, "" for none.
func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}
