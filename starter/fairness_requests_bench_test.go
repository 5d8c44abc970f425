package starter_test

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// runRequests records the worker's requests to the API server made by the
// activities of the runs whose workflow IDs contain a marker (tenant B's
// instances, "/b-"): how many a run makes, how long each takes, and for
// how much of the run one is in flight. It says whether B's runs wait on
// the API server or on something else.
type runRequests struct {
	marker string
	mu     sync.Mutex
	byRun  map[string][]request
}

// request is one request of a run: what it asked for ("GET secrets"),
// when it was sent and how long its answer took.
type request struct {
	what  string
	start time.Time
	took  time.Duration
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newRunRequests(marker string) *runRequests {
	return &runRequests{marker: marker, byRun: map[string][]request{}}
}

// wrap is the worker's transport (testenv.Parts.WorkerTransport).
func (r *runRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		ctx := req.Context()
		if !activity.IsActivity(ctx) {
			return rt.RoundTrip(req)
		}
		id := activity.GetInfo(ctx).WorkflowExecution.ID
		if !strings.Contains(id, r.marker) {
			return rt.RoundTrip(req)
		}
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		what := req.Method
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			what = "APPLY"
		}
		r.mu.Lock()
		r.byRun[id] = append(r.byRun[id], request{what: what + " " + resourceOf(req), start: start, took: time.Since(start)})
		r.mu.Unlock()
		return resp, err
	})
}

// requestInfo parses a request's path as the API server does.
var requestInfo = apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// resourceOf is the resource (and subresource) a request names:
// "secrets", "sfserviceinstances/status", "namespaces".
func resourceOf(req *http.Request) string {
	info, err := requestInfo.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return req.URL.Path
	}
	if info.Subresource != "" {
		return info.Resource + "/" + info.Subresource
	}
	return info.Resource
}

// summary says, over the recorded runs, the requests a run made, the time
// one took (p50/max), the share of its run each run spent with one in
// flight (p50), and each kind of request: how many a run made, and the
// time one took on average, the kind that took longest in all first.
func (r *runRequests) summary(runTime map[string]time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byRun) == 0 {
		return "no requests recorded"
	}
	var took []time.Duration
	var inFlight []float64
	total := 0
	type kind struct {
		n   int
		sum time.Duration
	}
	kinds := map[string]*kind{}
	for id, reqs := range r.byRun {
		total += len(reqs)
		for _, q := range reqs {
			took = append(took, q.took)
			k := kinds[q.what]
			if k == nil {
				k = &kind{}
				kinds[q.what] = k
			}
			k.n++
			k.sum += q.took
		}
		if run := runTime[id]; run > 0 {
			inFlight = append(inFlight, float64(busy(reqs))/float64(run))
		}
	}
	slices.Sort(took)
	slices.Sort(inFlight)
	names := make([]string, 0, len(kinds))
	for name := range kinds {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(kinds[b].sum, kinds[a].sum) })
	var top []string
	for _, name := range names {
		k := kinds[name]
		top = append(top, fmt.Sprintf("%s %.1f×%s", name, float64(k.n)/float64(len(r.byRun)), (k.sum/time.Duration(k.n)).Round(time.Millisecond)))
	}
	share := "?"
	if len(inFlight) > 0 {
		share = fmt.Sprintf("%.0f%%", 100*inFlight[len(inFlight)/2])
	}
	return fmt.Sprintf("%.1f requests a run, each %s/%s (p50/max), one in flight for %s of the run (p50): %s",
		float64(total)/float64(len(r.byRun)), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
		share, strings.Join(top, ", "))
}

// busy is how long at least one of reqs was in flight.
func busy(reqs []request) time.Duration {
	sorted := slices.Clone(reqs)
	slices.SortFunc(sorted, func(a, b request) int { return a.start.Compare(b.start) })
	var sum time.Duration
	var end time.Time
	for _, q := range sorted {
		qEnd := q.start.Add(q.took)
		switch {
		case !q.start.Before(end):
			sum += q.took
			end = qEnd
		case qEnd.After(end):
			sum += qEnd.Sub(end)
			end = qEnd
		}
	}
	return sum
}

// perProvision says how many requests the API server served per instance
// between two readings of apiRequests, every client's (Quartermaster's,
// the benchmark's, Kubernetes' own controllers'), and the kinds it served
// most: the load each provision puts on the server all tenants share.
func perProvision(before, after map[string]float64, n int) string {
	type kind struct {
		name string
		per  float64
	}
	var kinds []kind
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			kinds = append(kinds, kind{strings.TrimSuffix(k, "/"), d / float64(n)})
			total += d / float64(n)
		}
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Compare(b.per, a.per) })
	var top []string
	for _, k := range kinds[:min(8, len(kinds))] {
		top = append(top, fmt.Sprintf("%s %.1f", k.name, k.per))
	}
	return fmt.Sprintf("%.1f an instance; most: %s", total, strings.Join(top, ", "))
}
