// Package cli is qm's command line: the cobra root (root.go) and one file
// per command, dev.go, worker.go, watcher.go, api.go, version.go,
// massupdate.go and usagekind.go; connect.go is how every command reaches
// Kubernetes and Temporal, and run.go how a component command runs its
// parts. The qm binary's main.go, at the repository's root, only calls
// Main.
package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/contrib/envconfig"
	ctrl "sigs.k8s.io/controller-runtime"
)

// globals are the flags every command shares.
type globals struct {
	kubeconfig        string
	temporalAddress   string
	temporalNamespace string
	temporalProfile   string
	// temporalCompression is how requests to Temporal are compressed:
	// "none" or "gzip".
	temporalCompression string
	logLevel            string
	// catalog lists the catalog namespaces (tenancy.Boundary).
	catalog []string
	// watched lists the only namespaces the components watch (system.Options.Namespaces).
	watched []string
	logger  *slog.Logger
	// env is where the Temporal client configuration's variables are
	// looked up (nil: the process's environment).
	env envconfig.EnvLookup
	// identity, when set, is the Temporal client's identity instead of the
	// SDK's pid@host: a watcher shard names itself, so that each run's
	// history says which shard started it.
	identity string
	// payloadKeysDir and payloadKeyID, when set, encrypt what the runs
	// carry through Temporal (internal/codec).
	payloadKeysDir, payloadKeyID string
}

// Main runs the qm command line with the process's arguments until it
// ends or is interrupted (SIGINT, SIGTERM), and returns its exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "qm:", err)
		return 1
	}
	return 0
}

// NewRootCommand is qm and its commands.
func NewRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "qm",
		Short: "Quartermaster: a Kubernetes service broker and registry on Temporal",
		Long: `Quartermaster (qm) brokers services on Kubernetes. Platforms call its Open
Service Broker API, Kubernetes users create its custom resources, and every
operation runs as a durable Temporal workflow that operators follow in the
Temporal UI.

One binary plays every part: 'qm dev' runs all of them on this machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			g.logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			slog.SetDefault(g.logger)
			ctrl.SetLogger(logr.FromSlogHandler(g.logger.Handler()))
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to use (env KUBECONFIG; in a pod, the pod's service account)")
	pf.StringVar(&g.temporalAddress, "temporal-address", "", "host:port of the Temporal frontend (over TEMPORAL_ADDRESS and the profile)")
	pf.StringVar(&g.temporalNamespace, "temporal-namespace", "", `Temporal namespace (over TEMPORAL_NAMESPACE and the profile; default "default")`)
	pf.StringVar(&g.temporalProfile, "temporal-profile", "", "profile of the Temporal client configuration file, temporal.toml (over TEMPORAL_PROFILE)")
	pf.StringVar(&g.temporalCompression, "temporal-grpc-compression", envOr("QM_TEMPORAL_GRPC_COMPRESSION", "none"), `compression of requests to Temporal: "none", or "gzip" where the network costs more than the CPU, as to a Temporal across a WAN (env QM_TEMPORAL_GRPC_COMPRESSION)`)
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.StringVar(&g.payloadKeysDir, "payload-keys-dir", os.Getenv("QM_PAYLOAD_KEYS_DIR"), "directory of AES-256 keys, a file each named by its ID (a mounted Secret): what the runs carry through Temporal is encrypted, and every process must have the keys (env QM_PAYLOAD_KEYS_DIR; default: no encryption)")
	pf.StringVar(&g.payloadKeyID, "payload-key-id", os.Getenv("QM_PAYLOAD_KEY_ID"), "the key that encrypts; the others only decrypt (env QM_PAYLOAD_KEY_ID)")
	pf.StringSliceVar(&g.catalog, "catalog-namespaces", splitList(envOr("QM_CATALOG_NAMESPACES", envOr("QM_NAMESPACE", "default"))),
		"the namespaces whose SFServices, SFPlans and SFClusters are trusted; a plan elsewhere is a tenant's, applied as a ServiceAccount of its namespace (env QM_CATALOG_NAMESPACES, comma-separated; default QM_NAMESPACE, else default)")
	pf.StringSliceVar(&g.watched, "watch-namespaces", splitList(os.Getenv("QM_WATCH_NAMESPACES")),
		"the only namespaces whose resources the watcher and the worker's health checks watch, the catalog namespaces among them, for Quartermasters that share a cluster, each with a Temporal namespace of its own (env QM_WATCH_NAMESPACES, comma-separated; default: every namespace)")

	root.AddCommand(
		newDevCommand(g),
		newWorkerCommand(g),
		newWatcherCommand(g),
		newAPICommand(g),
		newUsageKindCommand(g),
		newCRDsCommand(g),
		newMassUpdateCommand(),
		newVersionCommand(),
		newBuildsCommand(g),
		newCodecServerCommand(g),
		newTraceCommand(g),
	)
	return root
}
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
