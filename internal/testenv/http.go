package testenv

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/api"
)

// OSBHeader is the header every OSB request carries.
var OSBHeader = map[string]string{"X-Broker-API-Version": "2.17"}

// HTTP sends a request, with basic auth when auth is set, the headers of
// header (a header given as "" is removed) and, with a body, the JSON
// content type. It returns the status, the body without surrounding space
// and the response headers; a server that cannot be reached is status 0
// with the error as the body, for tests that wait for a server to come up.
func HTTP(t testing.TB, method, url, body string, auth *api.Credentials, header map[string]string) (int, string, http.Header) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if auth != nil {
		req.SetBasicAuth(auth.Username, auth.Password)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(bytes.TrimSpace(raw)), resp.Header
}
