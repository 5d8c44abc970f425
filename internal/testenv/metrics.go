package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster/qm/internal/freeport"
)

// Metrics are the metric families of one scrape, by name.
type Metrics map[string]*dto.MetricFamily

// FreeAddr is a loopback address no one listens on now, for a component
// that takes an address rather than a listener.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePorts(t, 1)[0])
}

// FreePorts are n distinct loopback ports no one listens on now, below
// the ephemeral range (internal/freeport): a test that hands them to a
// server started seconds later must not find one taken by a connection.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Loopback(n)
	require.NoError(t, err)
	return ports
}

// Scrape reads a /metrics endpoint as Prometheus does; a failed scrape is
// reported on t (the test, or an Eventually condition's *assert.CollectT).
func Scrape(t require.TestingT, url string) Metrics {
	resp, err := http.Get(url)
	require.NoError(t, err, "scraping %s", url)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "scraping %s", url)
	require.Equal(t, http.StatusOK, resp.StatusCode, "scraping %s: %s", url, body)
	return ParseMetrics(t, url, body)
}

// ScrapeAPIServer reads the API server's /metrics, as its admin does,
// and parses the families named (every family if none is). A benchmark
// that watches a counter once a second (apiserver_request_total) in the
// process that runs Quartermaster must not parse the whole exposition: at
// 10,000 instances it was megabytes of histograms, and parsing them was
// three fifths of the process's CPU in BenchmarkDriftChecks' window,
// counted as Quartermaster's.
func ScrapeAPIServer(t require.TestingT, kube *Cluster, families ...string) Metrics {
	cs, err := kubernetes.NewForConfig(kube.Config)
	require.NoError(t, err)
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err, "scraping the API server's metrics")
	return ParseMetrics(t, "the API server", Families(body, families...))
}

// Families keeps of an exposition in Prometheus's text format the lines
// of the families named (their HELP, TYPE and samples, a histogram's
// buckets, sum and count among them), in order; with no name, all of it.
func Families(body []byte, names ...string) []byte {
	if len(names) == 0 {
		return body
	}
	var prefixes [][]byte
	for _, name := range names {
		prefixes = append(prefixes, []byte("# HELP "+name+" "), []byte("# TYPE "+name+" "))
		// A histogram's or a summary's samples carry a suffix.
		for _, sample := range []string{name, name + "_bucket", name + "_sum", name + "_count"} {
			prefixes = append(prefixes, []byte(sample+"{"), []byte(sample+" "))
		}
	}
	out := make([]byte, 0, 64<<10)
	for line := range bytes.Lines(body) {
		for _, p := range prefixes {
			if bytes.HasPrefix(line, p) {
				out = append(out, line...)
				break
			}
		}
	}
	return out
}

// ParseMetrics parses a scrape of from, in Prometheus's text format.
func ParseMetrics(t require.TestingT, from string, body []byte) Metrics {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "parsing the metrics of %s", from)
	return Metrics(families)
}

// Label is the value of a series' label name, "" if it has none.
func Label(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Value is the value of the series of name whose labels include these
// (name=value pairs), summed over the series that match; a histogram's
// value is its count. Absent series are 0.
func (m Metrics) Value(name string, labels ...string) float64 {
	f := m[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, s := range f.GetMetric() {
		if !hasLabels(s.GetLabel(), labels) {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Histogram != nil:
			sum += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// Count is Value as a whole number, for the counters and gauges that
// count things.
func (m Metrics) Count(name string, labels ...string) int {
	return int(math.Round(m.Value(name, labels...)))
}

// Has says whether a series of name has labels that include these.
func (m Metrics) Has(name string, labels ...string) bool {
	for _, s := range m[name].GetMetric() {
		if hasLabels(s.GetLabel(), labels) {
			return true
		}
	}
	return false
}

// Sum is a histogram's sum of observations over the series that match.
func (m Metrics) Sum(name string, labels ...string) float64 {
	sum := 0.0
	for _, s := range m[name].GetMetric() {
		if hasLabels(s.GetLabel(), labels) && s.Histogram != nil {
			sum += s.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

func hasLabels(have []*dto.LabelPair, want []string) bool {
	if len(want)%2 != 0 {
		panic(fmt.Sprintf("labels come in name, value pairs: %q", want))
	}
	for i := 0; i < len(want); i += 2 {
		// An empty value matches a label the series does not have, as in
		// PromQL: the exposition leaves empty labels out.
		found := want[i+1] == ""
		for _, l := range have {
			if l.GetName() == want[i] {
				found = l.GetValue() == want[i+1]
			}
		}
		if !found {
			return false
		}
	}
	return true
}
