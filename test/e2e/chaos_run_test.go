package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/chaos"
	"github.com/quartermaster/qm/internal/temporalcluster"
	"github.com/quartermaster/qm/internal/testenv"
	"github.com/quartermaster/qm/workflows"
)

// expectation is what the workload did to one instance, for the checks.
type expectation struct {
	name, binding    string
	plan             string // the plan the instance is on
	updates          int64  // completed updates: the instance's final generation is 1 + updates
	unbound, deleted bool
	osb              bool
	provisionAcked   bool
	states           map[string][]string // last_operation states seen, by operation
}

// TestChaos is the chaos run: Quartermaster as separate processes (two
// workers, a watcher, an API) on its own control plane and dev server, a
// mixed workload half through OSB and half through the Kubernetes API, and
// seeded faults of every kind meanwhile; then the invariants. `make test`
// runs a short version; `make chaos` a long one.
func TestChaos(t *testing.T) {
	k := knobs(t)
	t.Logf("chaos run on the Temporal %s: seed %d (QM_CHAOS_SEED=%d replays it), N %d, %d faults over %s", testenv.TemporalKind(), k.seed, k.seed, k.n, k.faults, k.duration)
	qm := buildQM(t)
	c := startCluster(t, qm)
	kube, err := ctrlclient.New(c.cp.Config, ctrlclient.Options{Scheme: crds.NewScheme()})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chaosNamespace}}))
	sys := testenv.Over(t, &testenv.Cluster{Config: c.cp.Config, Client: kube}, chaosNamespace, "chaos-svc")
	sys.Create(`{"apiVersion": "osb.servicefabrik.io/v1alpha1", "kind": "SFService", "metadata": {"name": "svc", "namespace": "chaos"},
		"spec": {"name": "chaos", "id": "chaos-svc", "description": "d", "bindable": true, "planUpdatable": true, "instancesRetrievable": true, "bindingsRetrievable": true}}`)
	// Ten minutes to finish: an operation may meet several faults, each
	// costing up to a minute (an activity on a dead worker times out).
	manager := "  maximum_polling_duration: 600\n  manager: {async: true}\n"
	small := sys.Plan("small", manager, testenv.Templates("chaos"))
	large := sys.Plan("large", manager, testenv.Templates("chaos"))
	require.Eventually(t, func() bool {
		status, body, _ := testenv.HTTP(http.MethodGet, c.apiURL+"/v2/catalog", "", &testenv.OSBCredentials, testenv.OSBHeader)
		return status == http.StatusOK && strings.Contains(body, small) && strings.Contains(body, large)
	}, time.Minute, 100*time.Millisecond, "the API serves the plans")

	// The observer: passwords as first seen, completions, memory.
	obs := &observer{passwords: map[string]string{}, changed: map[string]bool{}, lastGen: map[string]int64{}, present: map[string]bool{},
		completed: make(chan struct{})}
	stopObs := make(chan struct{})
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		for {
			select {
			case <-stopObs:
				return
			case <-time.After(500 * time.Millisecond):
			}
			c.sampleRSS()
			obs.look(ctx, kube)
		}
	}()

	// The faults.
	schedule := chaos.Schedule(k.seed, k.duration, k.faults, k.kinds)
	var faultsDone []chaos.Struck
	begin := time.Now()
	injector := make(chan error, 1)
	// The run lasts as long as the workload: when it ends before the
	// schedule does, the faults not yet struck are left out (and logged).
	run, endRun := context.WithCancel(ctx)
	defer endRun()
	go func() {
		var prev *chaos.Struck
		for i, f := range schedule {
			// The seeded schedule says when each fault strikes.
			select {
			case <-time.After(time.Until(begin.Add(f.At))):
			case <-run.Done():
				t.Logf("the workload ended before the last %d of %d faults struck", len(schedule)-i, len(schedule))
				injector <- nil
				return
			}
			obs.awaitRecovery(prev, k.recovery)
			s := chaos.Struck{Kind: f.Kind, Start: time.Now()}
			if err := c.inject(ctx, f); err != nil {
				injector <- err
				return
			}
			s.End = time.Now()
			faultsDone = append(faultsDone, s)
			prev = &s
		}
		injector <- nil
	}()

	// The workload, meanwhile.
	deadline := begin.Add(k.duration + 20*time.Minute)
	osb := &osbClient{url: c.apiURL, codes: map[string][]int{}}
	exps := make([]*expectation, k.n)
	// Instances start over the whole run, so that every fault finds
	// operations in flight.
	testenv.Parallel(t, k.n, func(i int) error {
		time.Sleep(time.Until(begin.Add(k.duration * time.Duration(i) / time.Duration(k.n)))) // the workload spreads its operations over the run
		e := &expectation{name: fmt.Sprintf("c-%03d", i), binding: fmt.Sprintf("c-%03d-b", i), osb: i%2 == 0, states: map[string][]string{}}
		exps[i] = e
		w := workload{kube: kube, osb: osb, e: e, deadline: deadline, small: small, large: large}
		// A failed operation ends this instance's workload, not the run:
		// its resource is then counted as stuck, with what it shows.
		if err := w.run(i); err != nil {
			t.Logf("%s", err)
		}
		return nil
	})
	workloadEnd := time.Now()
	endRun()
	require.NoError(t, <-injector, "the fault injector")
	if len(faultsDone) > 0 {
		t.Logf("the workload ended %s after the last fault ended", workloadEnd.Sub(faultsDone[len(faultsDone)-1].End).Round(time.Second))
	}
	close(stopObs)
	<-obsDone
	completions, passwords := obs.completions, obs.passwords

	report := chaos.Report{Seed: k.seed, N: k.n, Duration: time.Since(begin), Kinds: k.kinds, Faults: map[chaos.Kind]int{},
		Operations: map[string]int{}, ChangedSecrets: len(obs.changed), BadCodes: badCodes(osb.codes), PeakRSS: map[string]int64{},
		RecoveryBound: k.recovery}
	for i, f := range faultsDone {
		report.Faults[f.Kind]++
		// When each fault struck, for the one who reads a slow recovery
		// against the processes' logs.
		d, ok, cut := chaos.Recovery(faultsDone, i, completions)
		next, _, _ := chaos.Recovery(faultsDone[i:i+1], 0, completions) // whatever struck meanwhile
		recovered := fmt.Sprintf("recovered %s later (the next operation completed %s after its end)", d.Round(time.Millisecond), next.Round(time.Millisecond))
		switch {
		case !ok:
			recovered = "nothing completed after it"
		case cut:
			recovered = fmt.Sprintf("cut short by the next fault %s later, not recovered", d.Round(time.Millisecond))
		}
		t.Logf("fault %s: %s to %s, %s", f.Kind, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), recovered)
		obs.noted = append(obs.noted, fmt.Sprintf("%s fault %s struck", f.Start.Format(timelineFormat), f.Kind),
			fmt.Sprintf("%s fault %s ended: %s", f.End.Format(timelineFormat), f.Kind, recovered))
	}
	slices.Sort(obs.noted) // the format sorts by time
	keep(t, "timeline", strings.Join(obs.noted, "\n")+"\n")
	report.Recovery, report.Cut = chaos.Recoveries(faultsDone, completions)
	report.UnderFault = chaos.UnderFault(faultsDone)
	report.NextCompletion = map[chaos.Kind][]time.Duration{}
	for _, f := range faultsDone {
		if next, ok, _ := chaos.Recovery([]chaos.Struck{f}, 0, completions); ok {
			report.NextCompletion[f.Kind] = append(report.NextCompletion[f.Kind], next)
		}
	}
	for name, r := range c.roles {
		role := strings.TrimSuffix(strings.TrimSuffix(name, "-0"), "-1") // worker-0 and worker-1 are one role
		report.PeakRSS[role] = max(report.PeakRSS[role], r.peak)
	}
	settle(t, c)
	checkFinalStates(t, kube, exps, passwords, &report)
	checkRuns(t, c, exps, passwords, &report)
	report.Print(os.Stdout)
	assert.Empty(t, report.Broken(), "every invariant holds (seed %d)", k.seed)
}

// checkFinalStates counts what is stuck, duplicated or lost.
func checkFinalStates(t *testing.T, kube ctrlclient.Client, exps []*expectation, passwords map[string]string, r *chaos.Report) {
	ctx := context.Background()
	var secrets corev1.SecretList
	require.NoError(t, kube.List(ctx, &secrets, ctrlclient.InNamespace(chaosNamespace), ctrlclient.MatchingLabels{"app": "chaos"}))
	have := map[string]bool{}
	for _, s := range secrets.Items {
		have[s.Name] = true
	}
	for _, e := range exps {
		var inst osbv1alpha1.SFServiceInstance
		err := kube.Get(ctx, ctrlclient.ObjectKey{Namespace: chaosNamespace, Name: e.name}, &inst)
		switch {
		case e.deleted && !apierrors.IsNotFound(err):
			r.Stuck++
			explainStuck(t, kube, &inst)
		case !e.deleted && (err != nil || !testenv.Succeeded(1+e.updates)(&inst)):
			r.Stuck++
			if err == nil {
				explainStuck(t, kube, &inst)
			} else if e.provisionAcked {
				r.Lost++
			}
		}
		if have[e.name+"-db"] == e.deleted {
			r.Duplicated++ // an object without its instance, or an instance without its object
			t.Logf("%s: its Secret exists: %t, yet the instance was deleted: %t", e.name, have[e.name+"-db"], e.deleted)
		}
		delete(have, e.name+"-db")
		var b osbv1alpha1.SFServiceBinding
		err = kube.Get(ctx, ctrlclient.ObjectKey{Namespace: chaosNamespace, Name: e.binding}, &b)
		if gone := e.unbound || e.deleted; gone != apierrors.IsNotFound(err) || !gone && b.Status.State != osbv1alpha1.StateSucceeded {
			r.Stuck++
		}
		for op, states := range e.states {
			for i := 1; i < len(states); i++ {
				if states[i-1] == "succeeded" && states[i] == "in progress" {
					r.NotMonotonic++
					t.Logf("%s %s: last_operation went %v", e.name, op, states)
				}
			}
		}
	}
	r.Duplicated += len(have) // objects of instances the run never made
}

// explainStuck logs what a stuck instance and its Secret show, for the
// one who reads a failed run.
func explainStuck(t *testing.T, kube ctrlclient.Client, inst *osbv1alpha1.SFServiceInstance) {
	t.Logf("%s is stuck: deleting %t, generation %d, observed %d, state %s: %q", inst.Name, inst.DeletionTimestamp != nil,
		inst.Generation, inst.Status.ObservedGeneration, inst.Status.State, inst.Status.Description)
	var s corev1.Secret
	if err := kube.Get(context.Background(), ctrlclient.ObjectKey{Namespace: chaosNamespace, Name: inst.Name + "-db"}, &s); err == nil {
		t.Logf("%s-db: created %s, deleting since %v, finalizers %v, owners %v", inst.Name, s.CreationTimestamp, s.DeletionTimestamp, s.Finalizers, s.OwnerReferences)
	}
}

// settleBound is how long the checks wait for the runs still under way
// when the workload and the faults have ended: a run whose worker a late
// fault killed goes on once its workflow task times out (10 s), after a
// Temporal that a late fault stopped is back, and then writes its outcome.
const settleBound = 60 * time.Second

// settle waits, up to settleBound, until no run of the chaos namespace is
// running, so that the checks read outcomes, not runs that a last fault
// left a few seconds from their end. A run still running after that is
// what the invariant "runs left running" reports.
func settle(t *testing.T, c *cluster) {
	tc, err := client.Dial(client.Options{HostPort: c.temporalAddr})
	require.NoError(t, err)
	defer tc.Close()
	start := time.Now()
	running := -1
	// A bound passed is not a failure here: the invariant reports it.
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, settleBound, true, func(ctx context.Context) (bool, error) {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("QmNamespace = %q AND ExecutionStatus = \"Running\"", chaosNamespace)})
		if err != nil {
			return false, nil // Temporal may be coming back from a fault
		}
		running = len(resp.Executions)
		return running == 0, nil
	})
	t.Logf("the runs settled %s after the end (%d still running)", time.Since(start).Round(100*time.Millisecond), max(running, 0))
}

// checkRuns reads every run from Temporal: exactly one completed run per
// (resource, generation, operation), none left running, and no secret in
// a history, a search attribute or a log.
func checkRuns(t *testing.T, c *cluster, exps []*expectation, passwords map[string]string, r *chaos.Report) {
	ctx := context.Background()
	tc, err := client.Dial(client.Options{HostPort: c.temporalAddr})
	require.NoError(t, err)
	defer tc.Close()
	texts := map[string]string{}
	completed := map[string][]chaos.Run{} // by workflow ID
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("QmNamespace = %q", chaosNamespace), NextPageToken: token})
		require.NoError(t, err)
		for _, ex := range resp.Executions {
			attrs, _ := protojson.Marshal(ex.SearchAttributes)
			texts["search attributes of "+ex.Execution.WorkflowId] += string(attrs)
			var op string
			_ = json.Unmarshal(ex.SearchAttributes.IndexedFields["Operation"].Data, &op)
			switch ex.Status {
			case enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
				r.StillRunning++
			case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
				r.Operations[op]++
			default:
				// Every operation of the run must succeed: a run that
				// failed, was terminated or timed out is named, with how
				// it closed, for the one who reads a broken invariant.
				t.Logf("%s: a %s run closed %s", ex.Execution.WorkflowId, op, ex.Status)
			}
			iter := tc.GetWorkflowHistory(ctx, ex.Execution.WorkflowId, ex.Execution.RunId, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for iter.HasNext() {
				ev, err := iter.Next()
				require.NoError(t, err)
				raw, _ := protojson.Marshal(ev)
				texts["history of "+ex.Execution.WorkflowId+" "+ex.Execution.RunId] += string(raw) + "\n"
				if failed := ev.GetWorkflowExecutionFailedEventAttributes(); failed != nil {
					t.Logf("%s: the %s run failed: %s", ex.Execution.WorkflowId, op, failed.GetFailure().GetMessage())
				}
				if done := ev.GetWorkflowExecutionCompletedEventAttributes(); done != nil {
					var res workflows.Result
					if done.GetResult() != nil {
						require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(done.GetResult(), &res))
					}
					completed[ex.Execution.WorkflowId] = append(completed[ex.Execution.WorkflowId], chaos.Run{Operation: op, Generation: res.Generation, FoundDone: res.FoundDone})
				}
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	for _, e := range exps {
		for id, want := range map[string]chaos.Expected{
			"sfserviceinstance/" + chaosNamespace + "/" + e.name:   {Creates: "provision", Updates: e.updates, Removed: e.deleted},
			"sfservicebinding/" + chaosNamespace + "/" + e.binding: {Creates: "bind", Removed: e.unbound || e.deleted},
		} {
			for _, problem := range chaos.ExactlyOnce(completed[id], want) {
				r.NotOnce++
				t.Logf("%s: %s (runs: %v)", id, problem, completed[id])
			}
		}
	}
	for name, role := range c.roles {
		texts["log of "+name] = role.log.String()
	}
	texts["log of the control plane"] = c.cpLog.String()
	if c.tc != nil {
		for _, name := range append([]string{"postgres"}, temporalcluster.Services...) {
			raw, err := os.ReadFile(filepath.Join(c.tc.Dir, "logs", name+".log"))
			require.NoError(t, err, "the cluster's log of %s", name)
			texts["log of temporal's "+name] = string(raw)
		}
	} else {
		texts["log of the dev server"] = c.temporal.Out.(*testenv.SyncBuffer).String()
	}
	secrets := []string{testenv.OSBCredentials.Password}
	for _, p := range passwords {
		secrets = append(secrets, p)
	}
	for name, text := range texts {
		keep(t, name, text)
	}
	hits := chaos.Scan(texts, secrets)
	for _, h := range hits {
		t.Logf("a secret (%s) in the %s", h.Secret, h.Where)
	}
	r.SecretHits = len(hits)
	// The scan finds what is there: a password planted in a log line.
	if len(secrets) > 1 {
		planted := map[string]string{"log of a test": "level=INFO msg=oops password=" + secrets[1]}
		assert.Len(t, chaos.Scan(planted, secrets), 1, "the scan finds a planted secret")
	}
}

// timelineFormat is the time of a line of the kept timeline: with the
// date, so that the lines sort by it.
const timelineFormat = "2006-01-02T15:04:05.000"

// keep writes one text of the run (the timeline of faults and
// completions, a run's history as JSON lines, a process's log) to a file
// of the directory QM_CHAOS_KEEP names, for the one who traces a slow
// recovery afterwards through the histories; nothing when it is unset.
func keep(t *testing.T, name, text string) {
	dir := os.Getenv("QM_CHAOS_KEEP")
	if dir == "" {
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	file := strings.NewReplacer("/", "_", " ", "_", "'", "").Replace(name)
	require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644))
}
