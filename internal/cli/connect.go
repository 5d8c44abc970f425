package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/quartermaster/qm/internal/codec"
	"github.com/quartermaster/qm/internal/telemetry"
)

// kubeConfig reads the kubeconfig at path, or the pod's service account.
func kubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("no cluster: set --kubeconfig or KUBECONFIG, or run in a pod (or use 'qm dev')")
	}
	return cfg, err
}

// temporalOptions is how qm reaches Temporal, loaded as every Temporal
// tool loads it (the SDK's envconfig): a profile of the client
// configuration file (TEMPORAL_CONFIG_FILE, or temporal.toml in the user's
// config directory; profile --temporal-profile, TEMPORAL_PROFILE or
// "default"), then the TEMPORAL_* variables over it (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_TLS_* for mTLS, TEMPORAL_API_KEY), then
// --temporal-address and --temporal-namespace over both.
//
// Requests go uncompressed unless --temporal-grpc-compression is gzip (the
// SDK's own default): Temporal usually runs in or beside the cluster, where
// a provision is bound by CPU, and gzip of payloads of a few hundred bytes
// cost qm about 0.3 ms of CPU per provision, and Temporal more to undo it.
//
// A configuration that names no address is errNoTemporal: `qm api` then
// runs without mass updates, and `qm dev` starts its own dev server. A
// configuration that cannot be read is an error naming the file.
func (g *globals) temporalOptions() (client.Options, error) {
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{ConfigFileProfile: g.temporalProfile, EnvLookup: g.env})
	if err != nil {
		return client.Options{}, fmt.Errorf("loading the Temporal client configuration from %s: %w", g.temporalConfigFile(), err)
	}
	opts.HostPort = cmp.Or(g.temporalAddress, opts.HostPort)
	opts.Namespace = cmp.Or(g.temporalNamespace, opts.Namespace, "default")
	opts.Identity = cmp.Or(g.identity, opts.Identity)
	if opts.HostPort == "" {
		return client.Options{}, errNoTemporal
	}
	switch g.temporalCompression {
	case "", "none":
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	case "gzip":
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	default:
		return client.Options{}, fmt.Errorf(`--temporal-grpc-compression: %q is neither "none" nor "gzip"`, g.temporalCompression)
	}
	c, err := g.payloadCodec()
	if err != nil {
		return client.Options{}, err
	}
	if c != nil {
		opts.DataConverter, opts.FailureConverter = codec.Converters(c)
	}
	return opts, nil
}

// payloadCodec is the codec of --payload-keys-dir, nil when it is not set.
func (g *globals) payloadCodec() (*codec.Codec, error) {
	switch {
	case g.payloadKeysDir == "":
		return nil, nil
	case g.payloadKeyID == "":
		return nil, errors.New("--payload-keys-dir needs --payload-key-id (QM_PAYLOAD_KEY_ID): the key that encrypts")
	}
	c, err := codec.Load(g.payloadKeysDir, g.payloadKeyID)
	if err != nil {
		return nil, fmt.Errorf("--payload-keys-dir: %w", err)
	}
	return c, nil
}

// errNoTemporal is a client configuration that names no Temporal.
var errNoTemporal = errors.New("no Temporal: set --temporal-address or TEMPORAL_ADDRESS, or an address in a temporal.toml profile (or use 'qm dev')")

// temporalConfigFile is the file the client configuration is read from, as
// envconfig finds it: TEMPORAL_CONFIG_FILE, or the user's temporal.toml.
func (g *globals) temporalConfigFile() string {
	env := g.env
	if env == nil {
		env = envconfig.EnvLookupOS
	}
	file, _ := env.LookupEnv("TEMPORAL_CONFIG_FILE")
	return cmp.Or(file, envconfig.DefaultConfigFilePath())
}

// temporalMetrics records the Temporal client's metrics into
// controller-runtime's registry, which the worker's and the watcher's
// /metrics serve; once per process, as the registry is.
var temporalMetrics = sync.OnceValues(func() (client.MetricsHandler, error) {
	return telemetry.TemporalMetrics(ctrlmetrics.Registry, slog.Default())
})

// temporal dials the Temporal frontend of temporalOptions, and returns the
// client and the options it was dialled with.
func (g *globals) temporal(ctx context.Context) (client.Client, client.Options, error) {
	opts, err := g.temporalOptions()
	if err != nil {
		return nil, client.Options{}, err
	}
	tc, err := dialTemporal(ctx, opts, g.logger)
	return tc, opts, err
}

// dialTemporal dials Temporal with opts, logging to logger and recording
// the client's metrics: how every qm command reaches it, `qm dev` too.
func dialTemporal(ctx context.Context, opts client.Options, logger *slog.Logger) (client.Client, error) {
	opts.Logger = log.NewStructuredLogger(logger)
	var err error
	if opts.MetricsHandler, err = temporalMetrics(); err != nil {
		return nil, err
	}
	tc, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s (namespace %s): %w", opts.HostPort, opts.Namespace, err)
	}
	return tc, nil
}
