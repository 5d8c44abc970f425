package healthcheck

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
)

// TestTCPProbe: a listening port succeeds, a closed one fails, and a
// missing endpoint item tells nothing.
func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	endpoint := Endpoint{"host": host, "port": port}
	for _, tc := range []struct {
		name  string
		check primazav1alpha1.TCPCheck
		want  primazav1alpha1.CheckResult
	}{
		{"literal", primazav1alpha1.TCPCheck{Host: host, Port: int32(p)}, primazav1alpha1.CheckSucceeded},
		{"from the endpoint", primazav1alpha1.TCPCheck{FromEndpoint: &primazav1alpha1.TCPFromEndpoint{Host: "host", Port: "port"}}, primazav1alpha1.CheckSucceeded},
		{"missing item", primazav1alpha1.TCPCheck{Port: int32(p), FromEndpoint: &primazav1alpha1.TCPFromEndpoint{Host: "nohost"}}, primazav1alpha1.CheckUnknown},
	} {
		r := Probe{Check: &primazav1alpha1.HealthCheck{TCP: &tc.check}, Endpoint: endpoint}.Run(context.Background())
		assert.Equal(t, tc.want, r.Outcome, "%s: %s", tc.name, r.Message)
	}
	require.NoError(t, ln.Close())
	r := Probe{Check: &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{Host: host, Port: int32(p)}}}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckFailed, r.Outcome)
	assert.Contains(t, r.Message, "connection refused")
}

// TestHTTPProbe: the expected status succeeds, another fails, the URL's
// credentials stay out of the message, and https needs the CA bundle.
func TestHTTPProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	check := func(url string, status int32) Result {
		return Probe{Check: &primazav1alpha1.HealthCheck{HTTP: &primazav1alpha1.HTTPCheck{URL: url, ExpectedStatus: status}}}.Run(context.Background())
	}
	assert.Equal(t, primazav1alpha1.CheckSucceeded, check(srv.URL+"/up", 200).Outcome)
	down := check("http://user:pa55word@"+srv.Listener.Addr().String()+"/down", 200)
	assert.Equal(t, primazav1alpha1.CheckFailed, down.Outcome)
	assert.Contains(t, down.Message, "answered 503, not 200")
	assert.NotContains(t, down.Message, "pa55word")
	assert.Equal(t, primazav1alpha1.CheckSucceeded, check(srv.URL+"/down", 503).Outcome)

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	untrusted := check(tlsSrv.URL, 404)
	assert.Equal(t, primazav1alpha1.CheckFailed, untrusted.Outcome, untrusted.Message)
	ca := pemOf(tlsSrv)
	trusted := Probe{Check: &primazav1alpha1.HealthCheck{HTTP: &primazav1alpha1.HTTPCheck{URL: tlsSrv.URL, ExpectedStatus: 404}}, CABundle: ca}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckSucceeded, trusted.Outcome, trusted.Message)
	garbage := Probe{Check: &primazav1alpha1.HealthCheck{HTTP: &primazav1alpha1.HTTPCheck{URL: tlsSrv.URL}}, CABundle: []byte("nope")}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckUnknown, garbage.Outcome)
}

// TestASecretValueNeverReachesTheMessage: a check whose host, port or URL
// is read from a Secret names the endpoint item in its message, never the
// value, whether the check succeeds, is refused, or the name does not
// resolve (a DNS error quotes the name it looked up).
func TestASecretValueNeverReachesTheMessage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	tcp := &primazav1alpha1.HealthCheck{TCP: &primazav1alpha1.TCPCheck{FromEndpoint: &primazav1alpha1.TCPFromEndpoint{Host: "host", Port: "port"}}}
	secret := map[string]bool{"host": true, "port": true, "url": true}

	up := Probe{Check: tcp, Endpoint: Endpoint{"host": host, "port": port}, FromSecret: secret}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckSucceeded, up.Outcome, up.Message)
	assert.NotContains(t, up.Message, port)
	assert.Contains(t, up.Message, "<host from its Secret>")

	const password = "s3cr3t-pa55word.invalid"
	unresolved := Probe{Check: tcp, Endpoint: Endpoint{"host": password, "port": port}, FromSecret: secret}.Run(context.Background())
	assert.NotEqual(t, primazav1alpha1.CheckSucceeded, unresolved.Outcome)
	assert.NotContains(t, unresolved.Message, "s3cr3t", "the lookup's error quotes the host; the message does not")
	assert.Contains(t, unresolved.Message, "<redacted>")

	require.NoError(t, ln.Close())
	refused := Probe{Check: tcp, Endpoint: Endpoint{"host": host, "port": port}, FromSecret: secret}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckFailed, refused.Outcome)
	assert.NotContains(t, refused.Message, port)

	http := &primazav1alpha1.HealthCheck{HTTP: &primazav1alpha1.HTTPCheck{FromEndpoint: &primazav1alpha1.HTTPFromEndpoint{URL: "url"}}}
	r := Probe{Check: http, Endpoint: Endpoint{"url": "http://" + password + "/health"}, FromSecret: secret}.Run(context.Background())
	assert.Equal(t, primazav1alpha1.CheckFailed, r.Outcome)
	assert.NotContains(t, r.Message, "s3cr3t")
	assert.Contains(t, r.Message, "<url from its Secret>")

	// The same check with literal values shows them, as before.
	literal := Probe{Check: tcp, Endpoint: Endpoint{"host": password, "port": port}}.Run(context.Background())
	assert.Contains(t, literal.Message, password)
}
