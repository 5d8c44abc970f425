package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/quartermaster/qm/api"
)

// OSBHeader is the header every OSB request carries.
var OSBHeader = map[string]string{"X-Broker-API-Version": "2.17"}

// HTTP sends a request, with basic auth when auth is set, the headers of
// header (a header given as "" is removed) and, with a body, the JSON
// content type. It returns the status, the body without surrounding space
// and the response headers. A request that could not be made, a server
// that cannot be reached and a reply cut off (a killed server) are status
// 0 with the error as the body. It never fails the test itself, so that it
// can run anywhere, in an Eventually condition or a workload's goroutine;
// the caller checks the status.
func HTTP(method, url, body string, auth *api.Credentials, header map[string]string) (int, string, http.Header) {
	return HTTPWith(http.DefaultClient, method, url, body, auth, header)
}

// HTTPWith is HTTP through client c: one that trusts a test's CA.
func HTTPWith(c *http.Client, method, url, body string, auth *api.Credentials, header map[string]string) (int, string, http.Header) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return 0, err.Error(), nil
	}
	if auth != nil {
		req.SetBasicAuth(auth.Username, auth.Password)
	}
	if body != "" || method != http.MethodGet && method != http.MethodHead {
		// As the platforms and qm mass-update send them, a body or not.
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Sprintf("%s %s: reading the reply: %v", method, url, err), resp.Header
	}
	return resp.StatusCode, string(bytes.TrimSpace(raw)), resp.Header
}
