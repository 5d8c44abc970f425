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
	"strings"
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
	// FromSecret names the endpoint items whose values were read from a
	// Secret: no message (the status, an Event, the run's history) shows
	// them, only the item's name.
	FromSecret map[string]bool
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
	shownHost, shownPort := host, port
	var secrets []string
	var err error
	if c.FromEndpoint != nil && c.FromEndpoint.Host != "" && host == "" {
		if host, err = p.item(c.FromEndpoint.Host); err != nil {
			return unknown(err)
		}
		shownHost = p.shown(c.FromEndpoint.Host, host, &secrets)
	}
	if c.FromEndpoint != nil && c.FromEndpoint.Port != "" && c.Port == 0 {
		if port, err = p.item(c.FromEndpoint.Port); err != nil {
			return unknown(err)
		}
		shownPort = p.shown(c.FromEndpoint.Port, port, &secrets)
	}
	addr, shown := net.JoinHostPort(host, port), net.JoinHostPort(shownHost, shownPort)
	d := net.Dialer{Timeout: seconds(c.TimeoutSeconds)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return failed("tcp %s: %s", shown, redact(dialError(err).Error(), secrets))
	}
	_ = conn.Close()
	return Result{Outcome: primazav1alpha1.CheckSucceeded, Message: "tcp " + shown + " accepts connections"}
}

// shown is how a message shows the value of endpoint item name: as it is,
// or, read from a Secret, by the item's name (and kept in secrets, for
// redact).
func (p Probe) shown(name, value string, secrets *[]string) string {
	if !p.FromSecret[name] {
		return value
	}
	*secrets = append(*secrets, value)
	return "<" + name + " from its Secret>"
}

// redact takes every secret value out of msg, as an error that quotes
// what it was given (a DNS lookup's, say) would show it.
func redact(msg string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
		}
	}
	return msg
}

func (p Probe) http(ctx context.Context, c *primazav1alpha1.HTTPCheck) Result {
	raw := c.URL
	var secrets []string
	fromSecret := ""
	if c.FromEndpoint != nil {
		var err error
		if raw, err = p.item(c.FromEndpoint.URL); err != nil {
			return unknown(err)
		}
		if p.FromSecret[c.FromEndpoint.URL] {
			fromSecret = p.shown(c.FromEndpoint.URL, raw, &secrets)
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
	// The URL may carry credentials: messages show it redacted, or not
	// at all when it came from a Secret.
	shown := u.Redacted()
	if fromSecret != "" {
		shown = fromSecret
		secrets = append(secrets, u.Host, u.Hostname())
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return failed("GET %s: %s", shown, redact(dialError(err).Error(), secrets))
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
