package testenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exposition is a scrape with families whose names share prefixes, as
// the API server's do (apiserver_request_total beside
// apiserver_request_total_x and a histogram's _bucket series).
const exposition = `# HELP apiserver_request_duration_seconds Latency.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="GET",le="0.1"} 3
apiserver_request_duration_seconds_bucket{verb="GET",le="+Inf"} 4
apiserver_request_duration_seconds_sum{verb="GET"} 0.5
apiserver_request_duration_seconds_count{verb="GET"} 4
# HELP apiserver_request_total Counter of requests.
# TYPE apiserver_request_total counter
apiserver_request_total{resource="configmaps",verb="GET"} 7
apiserver_request_total{resource="secrets",verb="GET"} 2
# HELP apiserver_request_total_x Not the same family.
# TYPE apiserver_request_total_x counter
apiserver_request_total_x 9
# HELP up Up.
# TYPE up gauge
up 1
`

func TestFamiliesKeepsTheNamedOnes(t *testing.T) {
	all := ParseMetrics(t, "the sample", []byte(exposition))
	for _, tc := range []struct {
		names []string
		want  []string
	}{
		{names: nil, want: []string{"apiserver_request_duration_seconds", "apiserver_request_total", "apiserver_request_total_x", "up"}},
		{names: []string{"apiserver_request_total"}, want: []string{"apiserver_request_total"}},
		{names: []string{"up", "apiserver_request_duration_seconds"}, want: []string{"apiserver_request_duration_seconds", "up"}},
		{names: []string{"absent"}, want: []string{}},
	} {
		got := ParseMetrics(t, "the sample", Families([]byte(exposition), tc.names...))
		names := []string{}
		for name, f := range got {
			names = append(names, name)
			assert.Equal(t, all[name].String(), f.String(), "family %s as the whole scrape has it", name)
		}
		assert.ElementsMatch(t, tc.want, names, "families kept of %v", tc.names)
	}
	require.InDelta(t, 9, ParseMetrics(t, "the sample", Families([]byte(exposition), "apiserver_request_total")).Value("apiserver_request_total"), 0)
}
