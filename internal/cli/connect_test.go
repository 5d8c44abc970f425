package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
	"github.com/quartermaster/qm/workflows/runs"
)

// mapEnv is an environment for envconfig that is not the process's.
type mapEnv map[string]string

func (e mapEnv) Environ() []string {
	var out []string
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func (e mapEnv) LookupEnv(key string) (string, bool) { v, ok := e[key]; return v, ok }

// selfSigned writes a certificate and its key for a client, and returns
// their paths.
func selfSigned(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	rawKey, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: rawKey}), 0o600))
	return certPath, keyPath
}

// TestTemporalOptions: the client's connection comes from a temporal.toml
// profile, the TEMPORAL_* variables over it, and the flags over both.
func TestTemporalOptions(t *testing.T) {
	certPath, keyPath := selfSigned(t)
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`
[profile.default]
address = "temporal.internal:7233"
namespace = "brokers"

[profile.prod]
address = "prod.tmprl.cloud:7233"
namespace = "brokers.abc12"
[profile.prod.tls]
client_cert_path = %q
client_key_path = %q
`, certPath, keyPath)), 0o600))

	keys := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(keys, "k1"), bytes.Repeat([]byte{1}, 32), 0o600))

	malformed := filepath.Join(t.TempDir(), "malformed.toml")
	require.NoError(t, os.WriteFile(malformed, []byte("[profile.default]\naddress = \"x:7233\"\nnamespace\n"), 0o600))

	for _, tc := range []struct {
		name               string
		env                mapEnv
		flags              globals
		address, namespace string
		mtls, apiKey       bool
		gzip, encrypted    bool
		err                string
	}{
		{name: "encrypted payloads", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, flags: globals{payloadKeysDir: keys, payloadKeyID: "k1"},
			address: "env:7233", namespace: "default", encrypted: true},
		{name: "keys without the one that encrypts", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, flags: globals{payloadKeysDir: keys},
			err: "--payload-keys-dir needs --payload-key-id (QM_PAYLOAD_KEY_ID): the key that encrypts"},
		{name: "an encrypting key that is not there", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, flags: globals{payloadKeysDir: keys, payloadKeyID: "k2"},
			err: `--payload-keys-dir: no key "k2" to encrypt with among k1`},
		{name: "the default profile", env: mapEnv{"TEMPORAL_CONFIG_FILE": file}, address: "temporal.internal:7233", namespace: "brokers"},
		{name: "a profile with mTLS", env: mapEnv{"TEMPORAL_CONFIG_FILE": file, "TEMPORAL_PROFILE": "prod"}, address: "prod.tmprl.cloud:7233", namespace: "brokers.abc12", mtls: true},
		{name: "the profile flag", env: mapEnv{"TEMPORAL_CONFIG_FILE": file}, flags: globals{temporalProfile: "prod"}, address: "prod.tmprl.cloud:7233", namespace: "brokers.abc12", mtls: true},
		{name: "variables over the profile", env: mapEnv{"TEMPORAL_CONFIG_FILE": file, "TEMPORAL_ADDRESS": "env:7233"}, address: "env:7233", namespace: "brokers"},
		{name: "flags over both", env: mapEnv{"TEMPORAL_CONFIG_FILE": file, "TEMPORAL_ADDRESS": "env:7233", "TEMPORAL_NAMESPACE": "env-ns"},
			flags: globals{temporalAddress: "flag:7233", temporalNamespace: "flag-ns"}, address: "flag:7233", namespace: "flag-ns"},
		{name: "variables alone", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, address: "env:7233", namespace: "default"},
		{name: "mTLS from variables", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233", "TEMPORAL_TLS_CLIENT_CERT_PATH": certPath, "TEMPORAL_TLS_CLIENT_KEY_PATH": keyPath},
			address: "env:7233", namespace: "default", mtls: true},
		{name: "an API key", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233", "TEMPORAL_API_KEY": "key-kept-out-of-logs"}, address: "env:7233", namespace: "default", apiKey: true},
		{name: "gzip asked for", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, flags: globals{temporalCompression: "gzip"}, address: "env:7233", namespace: "default", gzip: true},
		{name: "a compression that is not known", env: mapEnv{"TEMPORAL_ADDRESS": "env:7233"}, flags: globals{temporalCompression: "zstd"},
			err: `--temporal-grpc-compression: "zstd" is neither "none" nor "gzip"`},
		{name: "a profile that is not in the file", env: mapEnv{"TEMPORAL_CONFIG_FILE": file, "TEMPORAL_PROFILE": "staging"}, err: `loading the Temporal client configuration from ` + file + `: unable to find profile staging in config data`},
		{name: "a file that is not TOML", env: mapEnv{"TEMPORAL_CONFIG_FILE": malformed},
			err: `loading the Temporal client configuration from ` + malformed + `: failed parsing config: toml: line 3 (last key "profile.default"): expected '.' or '=', but got '\n' instead`},
		{name: "nothing at all", env: mapEnv{"TEMPORAL_CONFIG_FILE": filepath.Join(t.TempDir(), "none.toml")},
			err: "no Temporal: set --temporal-address or TEMPORAL_ADDRESS, or an address in a temporal.toml profile (or use 'qm dev')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.flags
			g.env = tc.env
			opts, err := g.temporalOptions()
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.address, opts.HostPort)
			assert.Equal(t, tc.namespace, opts.Namespace)
			if tc.mtls {
				require.NotNil(t, opts.ConnectionOptions.TLS)
				assert.Len(t, opts.ConnectionOptions.TLS.Certificates, 1, "the client certificate")
			} else if !tc.apiKey {
				assert.Nil(t, opts.ConnectionOptions.TLS)
			}
			assert.Equal(t, tc.apiKey, opts.Credentials != nil)
			if tc.gzip {
				assert.IsType(t, &client.GrpcCompressionGzip{}, opts.ConnectionOptions.GrpcCompression)
			} else {
				assert.IsType(t, &client.GrpcCompressionNone{}, opts.ConnectionOptions.GrpcCompression, "uncompressed unless asked")
			}
			if tc.apiKey {
				assert.NotNil(t, opts.ConnectionOptions.TLS, "an API key goes over TLS")
			}
			assert.Equal(t, tc.encrypted, opts.DataConverter != nil && opts.FailureConverter != nil, "the codec's converters")
			if tc.encrypted {
				p, err := opts.DataConverter.ToPayload("hunter2")
				require.NoError(t, err)
				assert.Equal(t, "binary/encrypted", string(p.Metadata["encoding"]))
			}
		})
	}
}

// TestCompressionFromTheEnvironment: QM_TEMPORAL_GRPC_COMPRESSION, which
// the chart sets, is the flag's default.
func TestCompressionFromTheEnvironment(t *testing.T) {
	t.Setenv("QM_TEMPORAL_GRPC_COMPRESSION", "gzip")
	flag := NewRootCommand().PersistentFlags().Lookup("temporal-grpc-compression")
	require.NotNil(t, flag)
	assert.Equal(t, "gzip", flag.Value.String())
}

// TestWorkerConnectsThroughAProfile runs `qm worker` with nothing but a
// profile file naming the dev server, and has it run a workflow.
func TestWorkerConnectsThroughAProfile(t *testing.T) {
	kube := testenv.Kubernetes(t)
	tc := testenv.Temporal(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf("[profile.qm-test]\naddress = %q\nnamespace = \"default\"\n", testenv.TemporalAddress(t))), 0o600))
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
	t.Setenv("TEMPORAL_ADDRESS", "")
	os.Unsetenv("TEMPORAL_ADDRESS")

	cmd := NewRootCommand()
	cmd.SetArgs([]string{"worker", "--kubeconfig", kubeconfig, "--temporal-profile", "qm-test", "--health-addr", "0", "--metrics-addr", "0"})
	// The SDK's goroutines may still log as the worker stops.
	var logs testenv.SyncBuffer
	cmd.SetErr(&logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: "selfcheck/" + strings.ToLower(t.Name()), TaskQueue: runs.TaskQueue, WorkflowExecutionTimeout: time.Minute,
	}, workflows.SelfCheck, []string{"sfserviceinstances.osb.servicefabrik.io"})
	require.NoError(t, err)
	var res workflows.SelfCheckResult
	require.NoError(t, run.Get(context.Background(), &res), "the worker runs the workflow")
	assert.Empty(t, res.Missing)
	cancel()
	require.NoError(t, <-done, logs.String())
}

// TestAPIRefusesAMalformedTemporalConfig: `qm api` with a temporal.toml it
// cannot read stops at start, naming the file and the line, rather than
// running without mass updates.
func TestAPIRefusesAMalformedTemporalConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte("[profile.default]\naddress = \"x:7233\"\nnamespace\n"), 0o600))
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
	t.Setenv("TEMPORAL_ADDRESS", "")
	cmd := NewRootCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"api", "--listen", "127.0.0.1:0", "--kubeconfig", filepath.Join(t.TempDir(), "no-cluster-needed")})
	err := cmd.ExecuteContext(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	assert.Contains(t, err.Error(), "line 3")
}
