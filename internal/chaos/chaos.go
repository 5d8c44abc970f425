// Package chaos is the pure part of Quartermaster's chaos run (`make
// chaos`, and its short version in `make test`): the seeded schedule of
// faults, the secret scan, the recovery from each fault (recovery.go),
// which runs completed exactly once (runs.go), and the report. The run
// itself, which starts the system as processes and hurts them, is
// test/e2e's chaos_*_test.go.
package chaos

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults of the chaos run.
const (
	KillWorker   Kind = "kill a worker"
	KillWatcher  Kind = "kill the watcher"
	KillAPI      Kind = "kill the api"
	KillTemporal Kind = "kill temporal"
	StopKube     Kind = "stop kube-apiserver"
	PauseWorker  Kind = "SIGSTOP a worker"

	// The faults of a Temporal cluster (internal/temporalcluster): one
	// service's process killed while the others run, and the database
	// restarted under them.
	KillHistory     Kind = "kill temporal's history service"
	KillMatching    Kind = "kill temporal's matching service"
	KillFrontend    Kind = "kill temporal's frontend"
	RestartPostgres Kind = "restart postgresql"
)

// Kinds are the faults of a run on the dev server, in the report's order.
var Kinds = []Kind{KillWorker, KillWatcher, KillAPI, KillTemporal, StopKube, PauseWorker}

// ClusterKinds are the faults of a run on a Temporal cluster.
var ClusterKinds = []Kind{KillHistory, KillMatching, KillFrontend, RestartPostgres}

// allKinds is every kind, in the report's order.
var allKinds = slices.Concat(Kinds, ClusterKinds)

// Fault is one fault of a schedule.
type Fault struct {
	Kind Kind
	// At is when it strikes, from the start of the run.
	At time.Duration
	// For is how long the component stays down (or stopped) before it is
	// started again (or continued).
	For time.Duration
	// Which picks among replicas (the worker).
	Which int
}

// Schedule returns count faults at seeded random times over duration,
// cycling through kinds so that each kind comes count/len(kinds) times
// (give or take one). Downtimes: 0–5 s for a killed qm process, up to
// 20 s for kube-apiserver, up to 30 s for a stopped worker, 0–2 s for
// Temporal, one of its services or its database. Faults do not overlap:
// each waits for the one before to end. These are the earliest times: the
// run also leaves each fault its recovery window (Due), which can push the
// ones after it later.
func Schedule(seed uint64, duration time.Duration, count int, kinds []Kind) []Fault {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	order := make([]Kind, count)
	for i := range order {
		order[i] = kinds[i%len(kinds)]
	}
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	faults := make([]Fault, count)
	for i, k := range order {
		faults[i] = Fault{Kind: k, For: downtime(r, k), Which: r.IntN(2)}
	}
	// Spread the starts over the run, in order, leaving each fault its
	// downtime before the next.
	var busy time.Duration
	for _, f := range faults {
		busy += f.For
	}
	slack := max(duration-busy, 0)
	cuts := make([]time.Duration, count)
	for i := range cuts {
		cuts[i] = time.Duration(r.Int64N(int64(slack) + 1))
	}
	slices.Sort(cuts)
	var spent time.Duration
	for i := range faults {
		faults[i].At = cuts[i] + spent
		spent += faults[i].For
	}
	return faults
}

func downtime(r *rand.Rand, k Kind) time.Duration {
	ms := func(n int) time.Duration { return time.Duration(r.IntN(n+1)) * time.Millisecond }
	switch k {
	case StopKube:
		return time.Second + ms(19000)
	case PauseWorker:
		return time.Second + ms(29000)
	case KillTemporal, KillHistory, KillMatching, KillFrontend, RestartPostgres:
		return ms(2000)
	default:
		return ms(5000)
	}
}

// Hit is a secret found where it must not be.
type Hit struct {
	// Where names the text: a workflow history, a log.
	Where string
	// Secret is the secret's first characters, enough to find it again.
	Secret string
}

// Scan looks for every secret in every text. Secrets shorter than 8
// characters are skipped: they match by chance.
func Scan(texts map[string]string, secrets []string) []Hit {
	var hits []Hit
	names := make([]string, 0, len(texts))
	for name := range texts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, s := range secrets {
		if len(s) < 8 {
			continue
		}
		for _, name := range names {
			if strings.Contains(texts[name], s) {
				hits = append(hits, Hit{Where: name, Secret: s[:4] + "…"})
			}
		}
	}
	return hits
}

// Percentile is the p-th percentile (0–100) of ds, or 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1)*p/100 + 0.5)
	return s[min(i, len(s)-1)]
}

// Report is what a chaos run prints at its end.
type Report struct {
	Seed     uint64
	N        int
	Duration time.Duration
	// Kinds are the kinds of fault the run scheduled (nil: Kinds).
	Kinds []Kind
	// Faults counts the faults injected, by kind.
	Faults map[Kind]int
	// Operations counts the operations that completed, by name.
	Operations map[string]int
	// The invariants: each must be 0.
	Stuck, Duplicated, ChangedSecrets, NotOnce, StillRunning, NotMonotonic, BadCodes, Lost, SecretHits int
	// Recovery is, per fault and by its kind, the time from the fault's
	// end (the process back, the API server up, the worker continued) to
	// the next operation that completed, with no other fault in force
	// (Recoveries): each fault has its recovery window (Due).
	Recovery map[Kind][]time.Duration
	// Cut counts the recoveries the next fault cut short: nothing
	// completed within the window. Each is in Recovery as a lower bound.
	Cut int
	// UnderFault is how long faults were in force, of Duration.
	UnderFault time.Duration
	// NextCompletion is, per fault and by its kind, the time from the
	// fault's end to the next operation that completed, whatever struck
	// meanwhile: the upper bound of Recovery, which in a dense schedule
	// holds the downtime of the faults that follow.
	NextCompletion map[Kind][]time.Duration
	// RecoveryBound, if set, is the longest p99 of Recovery the run
	// accepts, over all faults.
	RecoveryBound time.Duration
	// PeakRSS is the largest resident memory seen, by qm process role.
	PeakRSS map[string]int64
}

// Broken lists the invariants that do not hold.
func (r Report) Broken() []string {
	var broken []string
	for _, c := range []struct {
		name string
		n    int
	}{{"stuck", r.Stuck}, {"duplicated", r.Duplicated}, {"changed secrets", r.ChangedSecrets},
		{"not exactly once", r.NotOnce}, {"runs left running", r.StillRunning}, {"non-monotonic status", r.NotMonotonic},
		{"codes the spec does not allow", r.BadCodes}, {"lost", r.Lost}, {"secrets found", r.SecretHits}} {
		if c.n != 0 {
			broken = append(broken, fmt.Sprintf("%s: %d", c.name, c.n))
		}
	}
	if p99 := Percentile(r.allRecoveries(), 99); r.RecoveryBound > 0 && p99 > r.RecoveryBound {
		broken = append(broken, fmt.Sprintf("recovery p99 %s over %s", p99.Round(time.Millisecond), r.RecoveryBound))
	}
	return broken
}

// allRecoveries is Recovery over every kind.
func (r Report) allRecoveries() []time.Duration {
	var all []time.Duration
	for _, k := range allKinds {
		all = append(all, r.Recovery[k]...)
	}
	return all
}

// Print writes the report as tables.
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "chaos run\tseed %d, N %d, %s\n", r.Seed, r.N, r.Duration.Round(time.Second))
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "fault\tinjected")
	total := 0
	kinds := r.Kinds
	if kinds == nil {
		kinds = Kinds
	}
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t%d\n", k, r.Faults[k])
		total += r.Faults[k]
	}
	fmt.Fprintf(tw, "all\t%d\n\t\n", total)
	fmt.Fprintln(tw, "operations completed\t")
	ops := make([]string, 0, len(r.Operations))
	for op := range r.Operations {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%d\n", op, r.Operations[op])
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "invariant\tcount")
	for _, c := range []struct {
		name string
		n    int
	}{{"stuck", r.Stuck}, {"duplicated objects", r.Duplicated}, {"changed secrets", r.ChangedSecrets},
		{"(resource, generation, operation) not run exactly once", r.NotOnce}, {"runs left running", r.StillRunning},
		{"last_operation back from succeeded", r.NotMonotonic}, {"OSB codes the spec does not allow", r.BadCodes},
		{"lost (2xx not in a resource)", r.Lost}, {"secrets in histories, attributes or logs", r.SecretHits}} {
		fmt.Fprintf(tw, "%s\t%d\n", c.name, c.n)
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintf(tw, "under a fault\t%s of %s (%.0f%%)\n", r.UnderFault.Round(time.Second), r.Duration.Round(time.Second),
		100*r.UnderFault.Seconds()/max(r.Duration.Seconds(), 1e-9))
	fmt.Fprintf(tw, "recoveries cut short by the next fault\t%d\n", r.Cut)
	fmt.Fprintln(tw, "recovery (fault's end to next completed operation, no other fault in force)\t")
	recovery := func(name string, ds []time.Duration) {
		fmt.Fprintf(tw, "%s\tp50 %s, p99 %s, over %d faults\n", name,
			Percentile(ds, 50).Round(time.Millisecond), Percentile(ds, 99).Round(time.Millisecond), len(ds))
	}
	for _, k := range allKinds {
		if len(r.Recovery[k]) > 0 {
			recovery(string(k), r.Recovery[k])
		}
	}
	recovery("all", r.allRecoveries())
	if len(r.NextCompletion) > 0 {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "fault's end to next completed operation, whatever struck meanwhile\t")
		var all []time.Duration
		for _, k := range allKinds {
			if len(r.NextCompletion[k]) > 0 {
				recovery(string(k), r.NextCompletion[k])
				all = append(all, r.NextCompletion[k]...)
			}
		}
		recovery("all", all)
	}
	roles := make([]string, 0, len(r.PeakRSS))
	for role := range r.PeakRSS {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	for _, role := range roles {
		fmt.Fprintf(tw, "peak RSS of %s\t%d MiB\n", role, r.PeakRSS[role]>>20)
	}
	_ = tw.Flush()
}
