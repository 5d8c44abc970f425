package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/testenv"
)

// testCA issues certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for a server on 127.0.0.1 or
// for a client, with the given serial number.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "qm test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	rawKey, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: rawKey})
}

func (ca *testCA) client(t *testing.T) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, 7, x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return pair
}

// TestHTTPS serves the API over TLS to a real TLS client: the handshake
// (TLS 1.2 or newer), basic auth still required without a client
// certificate, client certificates accepted or refused, and a certificate
// rotated on disk while a connection stays open.
func TestHTTPS(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true})
	dir := t.TempDir()
	ca, stranger := newTestCA(t, "qm test CA"), newTestCA(t, "someone else")
	files := &api.TLS{
		CertFile:     filepath.Join(dir, "tls.crt"),
		KeyFile:      filepath.Join(dir, "tls.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt"),
	}
	writeServerCert := func(serial int64, mod time.Time) {
		certPEM, keyPEM := ca.issue(t, serial, x509.ExtKeyUsageServerAuth)
		require.NoError(t, os.WriteFile(files.CertFile, certPEM, 0o600))
		require.NoError(t, os.WriteFile(files.KeyFile, keyPEM, 0o600))
		require.NoError(t, os.Chtimes(files.CertFile, mod, mod))
		require.NoError(t, os.Chtimes(files.KeyFile, mod, mod))
	}
	writeServerCert(1, time.Now().Add(-time.Minute))
	require.NoError(t, os.WriteFile(files.ClientCAFile, ca.pem, 0o600))

	srv := &api.Server{Namespace: s.Namespace, OSB: testenv.OSBCredentials, Admin: testenv.AdminCredentials,
		Kube: s.API.Kube, Offerings: s.API.Offerings, TLS: files}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, api.Listeners{OSB: ln, Admin: adminLn}) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-served) })

	base, adminBase := "https://"+ln.Addr().String(), "https://"+adminLn.Addr().String()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12},
		}}
	}
	getAt := func(c *http.Client, base, path string, creds *api.Credentials) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-Broker-API-Version", "2.17")
		if creds != nil {
			req.SetBasicAuth(creds.Username, creds.Password)
		}
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	get := func(c *http.Client, path string, creds *api.Credentials) (*http.Response, error) {
		return getAt(c, base, path, creds)
	}
	serial := func(resp *http.Response) int64 { return resp.TLS.PeerCertificates[0].SerialNumber.Int64() }

	// The handshake, and basic auth as before.
	kept := client()
	resp, err := get(kept, "/v2/catalog", &testenv.OSBCredentials)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, resp.TLS.Version, uint16(tls.VersionTLS12))
	assert.EqualValues(t, 1, serial(resp))
	resp, err = get(client(), "/v2/catalog", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "without a client certificate, basic auth is required")
	old := client()
	old.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS10
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	_, err = get(old, "/v2/catalog", &testenv.OSBCredentials)
	require.Error(t, err, "TLS 1.1 is refused")

	// Client certificates: the CA's authenticates OSB requests; a stranger's
	// is refused in the handshake; the admin API still wants basic auth.
	resp, err = get(client(ca.client(t)), "/v2/catalog", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a client certificate from the CA stands for basic auth")
	insists := client()
	strangers := stranger.client(t)
	// Go's client leaves out a certificate that the server's CAs did not
	// sign; this one sends it all the same, as another client might.
	insists.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &strangers, nil
	}
	_, err = get(insists, "/v2/catalog", nil)
	require.Error(t, err, "a certificate no client CA signed is refused in the handshake")
	resp, err = get(client(strangers), "/v2/catalog", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a client that holds back its unsigned certificate needs basic auth")
	resp, err = getAt(client(ca.client(t)), adminBase, "/admin/instances", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// The admin API is served over TLS on its own port, and only there.
	resp, err = getAt(client(), adminBase, "/admin/instances", &testenv.AdminCredentials)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the admin API, over TLS, on its own port")
	assert.EqualValues(t, 1, serial(resp))
	resp, err = get(client(), "/admin/instances", &testenv.AdminCredentials)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "no admin API on the OSB port")

	// A renewed certificate is served to new connections at once; the open
	// one goes on with the certificate it began with.
	writeServerCert(2, time.Now())
	resp, err = get(client(), "/v2/catalog", &testenv.OSBCredentials)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 2, serial(resp), "a new connection gets the renewed certificate")
	resp, err = get(kept, "/v2/catalog", &testenv.OSBCredentials)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 1, serial(resp), "the open connection is not cut")
}

// TestHTTPSNeedsReadableFiles: a missing key file stops the API at start
// with a message that names it.
func TestHTTPSNeedsReadableFiles(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{API: true})
	dir := t.TempDir()
	srv := &api.Server{Namespace: s.Namespace, OSB: testenv.OSBCredentials, Kube: s.API.Kube, Offerings: s.API.Offerings,
		TLS: &api.TLS{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "missing.key")}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = srv.Serve(context.Background(), api.Listeners{OSB: ln})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.key")
}
