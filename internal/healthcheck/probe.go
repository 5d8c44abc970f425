package healthcheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// Endpoint is a service's endpoint definition, resolved: each item's
// name and value, secret values read from their Secrets.
type Endpoint map[string]string

// Probe is a check the worker runs itself: tcp or http.
type Probe struct {
	Check *primazav1alpha1.HealthCheck
	// Endpoint is the service's endpoint definition, for fromEndpoint.
	Endpoint Endpoint
	// CABundle is the PEM the http check trusts, read from its Secret.
	CABundle []byte
}

// Run runs the probe. A refused, failed or wrong answer is CheckFailed; a
// probe that cannot be built (an endpoint item missing, a bad CA bundle)
// is CheckUnknown, for it says nothing of the service.
func (p Probe) Run(ctx context.Context) Result {
	switch {
	case p.Check.TCP != nil:
		return p.tcp(ctx, p.Check.TCP)
	case p.Check.HTTP != nil:
		return p.http(ctx, p.Check.HTTP)
	}
	return Result{Outcome: primazav1alpha1.CheckUnknown, Message: "the health check is neither tcp nor http"}
}

func (p Probe) tcp(ctx context.Context, c *primazav1alpha1.TCPCheck) Result {
	host, port := c.Host, strconv.Itoa(int(c.Port))
	var err error
	if c.FromEndpoint != nil && c.FromEndpoint.Host != "" && host == "" {
		if host, err = p.item(c.FromEndpoint.Host); err != nil {
			return unknown(err)
		}
	}
	if c.FromEndpoint != nil && c.FromEndpoint.Port != "" && c.Port == 0 {
		if port, err = p.item(c.FromEndpoint.Port); err != nil {
			return unknown(err)
		}
	}
	addr := net.JoinHostPort(host, port)
	d := net.Dialer{Timeout: seconds(c.TimeoutSeconds)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return failed("tcp %s: %v", addr, dialError(err))
	}
	_ = conn.Close()
	return Result{Outcome: primazav1alpha1.CheckSucceeded, Message: "tcp " + addr + " accepts connections"}
}

func (p Probe) http(ctx context.Context, c *primazav1alpha1.HTTPCheck) Result {
	raw := c.URL
	if c.FromEndpoint != nil {
		var err error
		if raw, err = p.item(c.FromEndpoint.URL); err != nil {
			return unknown(err)
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return unknown(errors.New("the health check's URL is not an http or https URL"))
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	if len(p.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(p.CABundle) {
			return unknown(errors.New("the health check's caBundle holds no PEM certificate"))
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	client := &http.Client{Transport: transport, Timeout: seconds(c.TimeoutSeconds),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return unknown(fmt.Errorf("building the request: %w", err))
	}
	// The URL may carry credentials: messages show it redacted.
	shown := u.Redacted()
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return failed("GET %s: %v", shown, dialError(err))
	}
	_ = resp.Body.Close()
	want := int(c.ExpectedStatus)
	if want == 0 {
		want = http.StatusOK
	}
	if resp.StatusCode != want {
		return failed("GET %s answered %d, not %d", shown, resp.StatusCode, want)
	}
	return Result{Outcome: primazav1alpha1.CheckSucceeded, Message: fmt.Sprintf("GET %s answered %d", shown, resp.StatusCode)}
}

// item is the value of the endpoint item name.
func (p Probe) item(name string) (string, error) {
	v, ok := p.Endpoint[name]
	if !ok {
		return "", fmt.Errorf("serviceEndpointDefinition has no item %q for the health check", name)
	}
	return v, nil
}

// dialError keeps the cause of a network error and drops the addresses
// the message already names.
func dialError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

func seconds(n int32) time.Duration {
	if n < 1 {
		n = 5
	}
	return time.Duration(n) * time.Second
}

func failed(format string, args ...any) Result {
	return Result{Outcome: primazav1alpha1.CheckFailed, Message: fmt.Sprintf(format, args...)}
}

func unknown(err error) Result {
	return Result{Outcome: primazav1alpha1.CheckUnknown, Message: err.Error()}
}
