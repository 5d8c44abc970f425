package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/testenv"
)

// auditLog is the API server's audit log, read for the service accounts
// qm-<component> of ns.
type auditLog struct{ path, ns string }

// apiCall is a kind of request one component makes, and the API
// server's answer (its HTTP status).
type apiCall struct {
	component, verb, resource string
	code                      int32
}

// apiCalls counts a component's requests by kind, over a window.
type apiCalls map[apiCall]int

// restReport is what BenchmarkAtRest prints.
type restReport struct {
	components           []string
	size                 restSize
	setup, settled       time.Duration
	empty, before, after restSample
	peak                 map[string]int64
	requests             apiCalls
	objects              map[string]map[string]int
	// events counts the Events of the window, by recorder, kind and reason.
	events map[string]int
}

// writeVerbs are the verbs that change what the API server stores.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// healthCheckChange is a write a health check's change makes: the
// service's state, and the Event that says so.
func healthCheckChange(c apiCall) bool {
	return c.resource == "registeredservices/status" || c.resource == "events"
}

// size is how long the log is now.
func (a auditLog) size(b *testing.B) int64 {
	info, err := os.Stat(a.path)
	require.NoError(b, err, "the API server's audit log")
	return info.Size()
}

// since counts the components' requests from offset to the log's end.
func (a auditLog) since(b *testing.B, offset int64) apiCalls {
	return a.between(b, offset, a.size(b))
}

// between counts the components' requests answered between two offsets
// of the log; a watch counts when it starts.
func (a auditLog) between(b *testing.B, from, to int64) apiCalls {
	calls := apiCalls{}
	a.read(b, from, to, func(ev *auditv1.Event, component string) {
		if (ev.Verb == "watch") != (ev.Stage == auditv1.StageResponseStarted) {
			return // each request once
		}
		resource := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			resource += "/" + ev.ObjectRef.Subresource
		}
		var code int32
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		calls[apiCall{component, ev.Verb, resource, code}]++
	})
	return calls
}

// cached counts, per component and collection, the objects its caches
// hold: those of every collection it has watched since it started, with
// the watch's selectors, listed now.
func (a auditLog) cached(b *testing.B, kube *testenv.Cluster) map[string]map[string]int {
	watches := map[string]map[string]bool{}
	a.read(b, 0, a.size(b), func(ev *auditv1.Event, component string) {
		if ev.Verb != "watch" || ev.Stage != auditv1.StageResponseStarted {
			return
		}
		u, err := url.Parse(ev.RequestURI)
		require.NoError(b, err)
		q := url.Values{}
		for _, key := range []string{"labelSelector", "fieldSelector"} {
			if v := u.Query().Get(key); v != "" {
				q.Set(key, v)
			}
		}
		if watches[component] == nil {
			watches[component] = map[string]bool{}
		}
		watches[component][u.Path+"?"+q.Encode()] = true
	})
	rc := kubernetes.NewForConfigOrDie(kube.Config).CoreV1().RESTClient()
	out := map[string]map[string]int{}
	for component, lists := range watches {
		out[component] = map[string]int{}
		for list := range lists {
			path, query, _ := strings.Cut(list, "?")
			q, err := url.ParseQuery(query)
			require.NoError(b, err)
			req := rc.Get().AbsPath(path).SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
			for key := range q {
				req = req.Param(key, q.Get(key))
			}
			raw, err := req.DoRaw(context.Background())
			require.NoError(b, err, "listing %s", list)
			var items metav1.PartialObjectMetadataList
			require.NoError(b, json.Unmarshal(raw, &items))
			out[component][strings.TrimSuffix(list, "?")] = len(items.Items)
		}
	}
	return out
}

// read calls each for every event of the log between two offsets made by a
// component's service account.
func (a auditLog) read(b *testing.B, from, to int64, each func(ev *auditv1.Event, component string)) {
	f, err := os.Open(a.path)
	require.NoError(b, err)
	defer f.Close()
	prefix := "system:serviceaccount:" + a.ns + ":qm-"
	sc := bufio.NewScanner(io.NewSectionReader(f, from, to-from))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), prefix) {
			continue
		}
		var ev auditv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef == nil {
			continue // a line cut at the offset, or a request of no resource (discovery)
		}
		if component, ok := strings.CutPrefix(ev.User.Username, prefix); ok {
			each(&ev, component)
		}
	}
	require.NoError(b, sc.Err())
}

// writes lists the kinds of writes made, leader-election leases left out,
// and health checks' changes too unless withChecks.
func (c apiCalls) writes(withChecks bool) []apiCall {
	var out []apiCall
	for call := range c {
		if !slices.Contains(writeVerbs, call.verb) || call.resource == "leases" || (!withChecks && healthCheckChange(call)) {
			continue
		}
		out = append(out, call)
	}
	return out
}

// unexpectedWrites are the writes at rest that are neither a health
// check's change nor a lease's renewal.
func (c apiCalls) unexpectedWrites() []string {
	var out []string
	for _, call := range c.writes(false) {
		out = append(out, fmt.Sprintf("the %s wrote: %s %s (%d) x%d", call.component, call.verb, call.resource, call.code, c[call]))
	}
	slices.Sort(out)
	return out
}

func (r restReport) String() string {
	var w strings.Builder
	window := r.after.at.Sub(r.before.at)
	minutes := window.Minutes()
	fmt.Fprintf(&w, "\nat rest: %d instances with a binding each, %d registered services (tcp check every 5 minutes), %d claims;\n"+
		"  set up in %v, settled %v later; then %v watched, the release one worker, one watcher and one API (qm processes), and %d watcher shards beside them\n",
		r.size.instances, r.size.services, r.size.claims, r.setup.Round(time.Second), r.settled.Round(time.Second), window.Round(time.Second),
		len(r.components)-len(restComponents))
	fmt.Fprintf(&w, "  %-8s %14s %14s %14s %14s %12s %14s\n", "process", "RSS at rest", "RSS empty", "heap at rest", "heap empty", "CPU (cores)", "objects cached")
	var cores float64
	for _, c := range r.components {
		used := (r.after.cpu[c] - r.before.cpu[c]).Seconds() / window.Seconds()
		if slices.Contains(restComponents, c) {
			cores += used
		}
		fmt.Fprintf(&w, "  %-8s %14s %14s %14s %14s %12.4f %14d\n", c, mb(r.peak[c]), mb(r.empty.rss[c]), mb(r.after.heap[c]), mb(r.empty.heap[c]), used, total(r.objects[c]))
	}
	fmt.Fprintf(&w, "  memory per cached object (at rest less empty, over the objects its caches hold), and what they hold:\n")
	for _, c := range r.components {
		if n := total(r.objects[c]); n > 0 {
			fmt.Fprintf(&w, "    %-8s heap %6.0f B, RSS %6.0f B\n", c, float64(r.after.heap[c]-r.empty.heap[c])/float64(n), float64(r.peak[c]-r.empty.rss[c])/float64(n))
		}
		for _, list := range slices.Sorted(maps.Keys(r.objects[c])) {
			fmt.Fprintf(&w, "      %6d %s\n", r.objects[c][list], list)
		}
	}
	fmt.Fprintf(&w, "  CPU of the rest in the window, in cores:")
	for _, name := range slices.Sorted(maps.Keys(r.after.others)) {
		fmt.Fprintf(&w, " %s %.4f", name, (r.after.others[name]-r.before.others[name]).Seconds()/window.Seconds())
	}
	fmt.Fprintf(&w, "\n  API requests per minute, by component, verb and resource:\n")
	calls := slices.SortedFunc(maps.Keys(r.requests), func(a, b apiCall) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
	fmt.Fprintf(&w, "    %-8s %-7s %-40s %6s %8s\n", "", "verb", "resource", "status", "per min")
	for _, call := range calls {
		fmt.Fprintf(&w, "    %-8s %-7s %-40s %6d %8.2f\n", call.component, call.verb, call.resource, call.code, float64(r.requests[call])/minutes)
	}
	fmt.Fprintf(&w, "  Events recorded in the window, by recorder, kind and reason:\n")
	for _, key := range slices.Sorted(maps.Keys(r.events)) {
		fmt.Fprintf(&w, "    %-60s %6d\n", key, r.events[key])
	}
	w.WriteString(r.shardShares())
	unexpected := 0
	for _, call := range r.requests.writes(false) {
		unexpected += r.requests[call]
	}
	for _, c := range restComponents {
		fmt.Fprint(&w, testenv.BenchVerdict("resident memory of the "+c+" at rest", float64(r.peak[c])/(1<<20), 300, "MB", true))
	}
	fmt.Fprint(&w, testenv.BenchVerdict("Quartermaster's CPU at rest, its three processes", cores, 0.02, "cores", true))
	fmt.Fprint(&w, testenv.BenchVerdict("writes at rest per minute but health checks' changes and leader-election leases", float64(unexpected)/minutes, 0, "", true))
	return w.String()
}

// shardShares says what each watcher shard holds beside the whole
// watcher: its resident memory and its cached objects, each as a share of
// the whole one's.
func (r restReport) shardShares() string {
	var w strings.Builder
	whole, wholeObjects := r.peak["watcher"], total(r.objects["watcher"])
	for _, c := range r.components[len(restComponents):] {
		if whole == 0 || wholeObjects == 0 {
			break
		}
		fmt.Fprintf(&w, "  %s beside the whole watcher: RSS %s (%.0f %%), objects cached %d (%.0f %%)\n", c,
			mb(r.peak[c]), 100*float64(r.peak[c])/float64(whole), total(r.objects[c]), 100*float64(total(r.objects[c]))/float64(wholeObjects))
	}
	return w.String()
}

// total is the sum of counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func mb(bytes int64) string { return fmt.Sprintf("%.1f MB", float64(bytes)/(1<<20)) }

// cpuOf is the CPU p has used so far, from /proc.
func cpuOf(p *process) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// utime and stime are the 14th and 15th fields, the 12th and 13th after the ")".
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	var ticks int64
	for _, f := range fields[11:13] {
		n, _ := strconv.ParseInt(f, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// rssOf is p's resident memory now, in bytes, from /proc.
func rssOf(p *process) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heapOf reads go_memstats_heap_inuse_bytes from a process's /metrics; a
// failed scrape is reported on t.
func heapOf(t require.TestingT, url string) int64 {
	m := testenv.Scrape(t, url)
	require.True(t, m.Has("go_memstats_heap_inuse_bytes"), "%s has go_memstats_heap_inuse_bytes", url)
	return int64(m.Value("go_memstats_heap_inuse_bytes"))
}

// metaItems is a list's items as objects.
func metaItems(list ctrlclient.ObjectList) ([]ctrlclient.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]ctrlclient.Object, len(objs))
	for i, o := range objs {
		out[i] = o.(ctrlclient.Object)
	}
	return out, nil
}
