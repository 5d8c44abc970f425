package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/internal/testenv"
)

// TestMadeUpMethodsAddNoSeries: 500 requests without credentials, each
// with a method of its own, are answered 405 and counted under method
// "other": one counter and one histogram, not a series per method.
func TestMadeUpMethodsAddNoSeries(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Parallel: true, API: true})
	for i := range 500 {
		req, err := http.NewRequest(fmt.Sprintf("MADEUP%d", i), s.URL+"/v2/catalog", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	}
	resp, err := http.Get(s.APIMetrics)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	metrics := string(body)
	assert.Contains(t, metrics, "\n"+`qm_api_requests_total{code="405",method="other",route="unmatched"} 500`+"\n")
	assert.NotContains(t, metrics, "MADEUP", "no made-up method is a label value")
	other := 0
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "qm_api_request") && strings.Contains(line, `method="other"`) {
			other++
		}
	}
	// The counter, and the histogram's 11 buckets, sum and count.
	assert.Equal(t, 14, other, "the made-up methods' series")
}
