package registry_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
)

func renderWith(t *testing.T, r *registry.Registry, tmpl string) (string, error) {
	t.Helper()
	return plan.Go("test", tmpl, plan.Values{"registry": r.Values()}, plan.Funcs(r), plan.Bounds{})
}

// roundTrip stores and reloads a registry, as a retried activity would.
func roundTrip(t *testing.T, r *registry.Registry) *registry.Registry {
	t.Helper()
	data, err := r.Encode()
	require.NoError(t, err)
	out, err := registry.Decode(r.Kind(), data)
	require.NoError(t, err)
	return out
}

func TestKeyAccess(t *testing.T) {
	// A registry Secret may hold reserved keys (written by the inter-operator).
	r, err := registry.Decode(registry.Instance, map[string][]byte{
		registry.KeyInstanceID: []byte(`"i-1"`), registry.KeyNamespace: []byte(`"ns"`),
		registry.KeyParameters: []byte(`{"size": "s"}`),
	})
	require.NoError(t, err)

	out, err := renderWith(t, r, `{{ registry "instance-id" }}/{{ .registry.namespace }}`)
	require.NoError(t, err)
	assert.Equal(t, "i-1/ns", out)

	for _, tc := range []struct{ tmpl, want string }{
		{`{{ setRegistry "instance-id" "x" }}`, `registry key "instance-id" is read-only`},
		{`{{ setRegistry "plan-id" "x" }}`, `registry key "plan-id" is read-only`},
		{`{{ setRegistry "operation" "x" }}`, `registry key "operation" is reserved: templates cannot write it`},
		{`{{ registry "parameters" }}`, `registry key "parameters" is reserved: templates cannot read it`},
		{`{{ setRegistry "bad key!" 1 }}`, `registry key "bad key!" is not a valid Secret key`},
	} {
		_, err := renderWith(t, r, tc.tmpl)
		require.Error(t, err, tc.tmpl)
		assert.Contains(t, err.Error(), tc.want)
	}
	assert.NotContains(t, r.Values(), registry.KeyParameters, ".registry hides reserved keys")

	_, err = renderWith(t, r, `{{ setRegistry "dashboard-url" "https://db.example.com" }}{{ setRegistry "replicas" 3 }}`)
	require.NoError(t, err)
	again := roundTrip(t, r)
	v, _ := again.Get("replicas")
	assert.InDelta(t, 3, v, 0, "a number stays a number")
	v, _ = again.Get(registry.KeyDashboardURL)
	assert.Equal(t, "https://db.example.com", v)
}

func TestGeneratedValuesAreMadeOnce(t *testing.T) {
	r := registry.New(registry.Instance, nil)
	tmpl := `{{ generatePassword "admin-password" 24 }}|{{ generatePassword "pin" 6 "0123456789" }}|{{ generatePrivateKey "tls-key" "ec" 256 }}`
	first, err := renderWith(t, r, tmpl)
	require.NoError(t, err)
	parts := strings.Split(first, "|")
	assert.Len(t, parts[0], 24)
	assert.Regexp(t, `^[0-9]{6}$`, parts[1])
	assert.Contains(t, parts[2], "BEGIN PRIVATE KEY")

	// A retry or an update reads the stored registry and gets the same values.
	second, err := renderWith(t, roundTrip(t, r), tmpl)
	require.NoError(t, err)
	assert.Equal(t, first, second)
}

func TestCertificateChain(t *testing.T) {
	r := registry.New(registry.Instance, nil)
	_, err := renderWith(t, r, `
{{- generatePrivateKey "ca-key" "ec" }}
{{- generateCertificate "ca" (dict "type" "ca" "key" "ca-key" "commonName" "instance CA") }}
{{- generatePrivateKey "server-key" "rsa" 2048 }}
{{- generateCertificate "server" (dict "type" "server" "key" "server-key" "commonName" "db" "dnsNames" (list "db.tenant.svc") "signerCert" "ca" "signerKey" "ca-key") }}`)
	require.NoError(t, err)

	// A binding inherits the CA and signs a client certificate with it.
	b := registry.New(registry.Binding, map[string]string{registry.KeyBindingID: "b-1"})
	b.Inherit(roundTrip(t, r))
	_, err = renderWith(t, b, `
{{- generatePrivateKey "client-key" "ed25519" }}
{{- generateCertificate "client" (dict "type" "client" "key" "client-key" "commonName" "app" "signerCert" "ca" "signerKey" "ca-key") }}`)
	require.NoError(t, err)

	pool := x509.NewCertPool()
	pool.AddCert(cert(t, r, "ca"))
	server := cert(t, r, "server")
	_, err = server.Verify(x509.VerifyOptions{Roots: pool, DNSName: "db.tenant.svc"})
	require.NoError(t, err, "the server certificate chains to the instance CA")
	_, err = cert(t, b, "client").Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "the binding's client certificate chains to the instance CA")
	_, err = r.Get("client")
	require.NoError(t, err)
	v, _ := r.Get("client")
	assert.Nil(t, v, "an instance cannot see its bindings' keys")

	for _, tc := range []struct{ tmpl, want string }{
		{`{{ generateCertificate "x" (dict "type" "server" "key" "server-key") }}`, `needs "signerCert" and "signerKey"`},
		{`{{ generateCertificate "x" (dict "type" "ca" "key" "nope") }}`, `registry key "nope" holds no private key`},
		{`{{ generateCertificate "x" (dict "type" "intermediate" "key" "ca-key") }}`, `must be ca, server or client`},
		{`{{ generatePrivateKey "k2" "dsa" }}`, `unknown algorithm "dsa"`},
		{`{{ generatePassword "p2" 0 }}`, `length 0 is not between 1 and 4096`},
	} {
		_, err := renderWith(t, r, tc.tmpl)
		require.Error(t, err, tc.tmpl)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestBindingInheritsOnce(t *testing.T) {
	inst, err := registry.Decode(registry.Instance, map[string][]byte{
		registry.KeyInstanceID: []byte(`"i-1"`), registry.KeyParameters: []byte(`{"secret": "x"}`),
	})
	require.NoError(t, err)
	require.NoError(t, inst.Set("db-password", "first"))

	b := registry.New(registry.Binding, map[string]string{registry.KeyBindingID: "b-1", registry.KeyInstanceID: "i-1"})
	b.Inherit(inst)
	require.NoError(t, inst.Set("db-password", "second"))

	v, _ := b.Get("db-password")
	assert.Equal(t, "first", v, "an instance update does not reach an existing binding")
	data, err := b.Encode()
	require.NoError(t, err)
	assert.NotContains(t, data, registry.KeyParameters, "reserved keys are not inherited")
}

func cert(t *testing.T, r *registry.Registry, key string) *x509.Certificate {
	t.Helper()
	v, err := r.Get(key)
	require.NoError(t, err)
	block, _ := pem.Decode([]byte(v.(string)))
	require.NotNil(t, block)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}
