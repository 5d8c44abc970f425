package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// TLS serves the API over HTTPS (TLS 1.2 or newer).
type TLS struct {
	// CertFile and KeyFile hold the serving certificate and its key, in
	// PEM. They are read again when either changes (a Secret that
	// cert-manager renews, say), so a rotation needs no restart; open
	// connections keep the certificate they began with.
	CertFile, KeyFile string
	// ClientCAFile, when set, lets OSB clients authenticate with a client
	// certificate that one of its CAs signed, instead of basic auth. A
	// certificate that none of them signed is refused in the handshake; a
	// client without one still needs basic auth. The admin API always
	// needs basic auth.
	ClientCAFile string
}

// config returns the TLS configuration, or an error that names the file
// that could not be read.
func (t *TLS) config() (*tls.Config, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("HTTPS needs both a certificate and a key (--tls-cert-file and --tls-key-file)")
	}
	certs := &certificate{certFile: t.CertFile, keyFile: t.KeyFile}
	if _, err := certs.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get}
	if t.ClientCAFile != "" {
		raw, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("the client CA file %s holds no PEM certificate", t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// certificate is a key pair read from files, and read again when they
// change. A pair that fails to load (caught half-written, say) keeps the
// last good one in service until the files are whole again.
type certificate struct {
	certFile, keyFile string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]fileStamp
}

// fileStamp tells whether a file changed since it was read.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// get returns the current certificate, reloading the files if they
// changed: one stat of each per handshake.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certStamp, err1 := stampOf(c.certFile)
	keyStamp, err2 := stampOf(c.keyFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := errors.Join(err1, err2); err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, fmt.Errorf("reading the TLS certificate: %w", err)
	}
	stamp := [2]fileStamp{certStamp, keyStamp}
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, fmt.Errorf("loading the TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}

// clientCertified tells whether the request came over a connection whose
// client certificate was verified against the client CAs.
func clientCertified(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}
