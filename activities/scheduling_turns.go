package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/scheduling"
)

// A worker's decisions in one namespace are taken in turns, and all those
// that wait for a turn are taken in the next one together: one read of the
// ledger and of the clusters, each decision placed before the next is
// taken (scheduling.Place), and one write of the ledger. Decisions of one
// worker thus never make each other decide again, and a burst of
// provisions costs a few ledger writes rather than one each; only another
// worker's write can send a turn back to decide again.

// turn is a namespace's queue of decisions waiting, and whether a turn is
// under way to take them.
type turn struct {
	mu      sync.Mutex
	waiting []*waitingDecision
	running bool
}

// waitingDecision is one decision waiting for its turn.
type waitingDecision struct {
	inst *osbv1alpha1.SFServiceInstance
	req  scheduling.Request
	done chan decided // buffered: the turn never waits for its taker
}

type decided struct {
	d   scheduling.Decision
	err error
}

// turnTimeout bounds one turn's reads and writes; it runs apart from the
// activity that started it, whose context ends with that activity.
const turnTimeout = 30 * time.Second

// decideInTurn decides where inst goes, in the namespace's next turn.
func (s *Scheduling) decideInTurn(ctx context.Context, inst *osbv1alpha1.SFServiceInstance, req scheduling.Request) (scheduling.Decision, error) {
	v, _ := s.turns.LoadOrStore(inst.Namespace, &turn{})
	t := v.(*turn)
	p := &waitingDecision{inst: inst, req: req, done: make(chan decided, 1)}
	t.mu.Lock()
	t.waiting = append(t.waiting, p)
	start := !t.running
	t.running = true
	t.mu.Unlock()
	if start {
		go s.takeTurns(inst.Namespace, t)
	}
	select {
	case r := <-p.done:
		return r.d, r.err
	case <-ctx.Done():
		return scheduling.Decision{}, ctx.Err() // the retried step finds its reservation, if the turn made one
	}
}

// takeTurns takes the decisions waiting, turn after turn, until none is.
func (s *Scheduling) takeTurns(namespace string, t *turn) {
	for {
		t.mu.Lock()
		batch := t.waiting
		t.waiting = nil
		if len(batch) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), turnTimeout)
		results, err := s.decideAll(ctx, namespace, batch)
		cancel()
		for i, p := range batch {
			if err != nil {
				p.done <- decided{err: err}
				continue
			}
			p.done <- results[i]
		}
	}
}

// decideAll takes the decisions of batch from the ledger as it is now, and
// writes them there at once; it starts again when another worker wrote
// the ledger first.
func (s *Scheduling) decideAll(ctx context.Context, namespace string, batch []*waitingDecision) ([]decided, error) {
	for conflicts := 0; ; conflicts++ {
		cm, led, err := s.readLedger(ctx, namespace)
		if err != nil {
			return nil, err
		}
		views, err := s.clusters(ctx, namespace, led)
		if err != nil {
			return nil, err
		}
		results := make([]decided, len(batch))
		reserved := false
		for i, p := range batch {
			if r, ok := led.Reserved[p.inst.Name]; ok && r.UID == p.inst.UID {
				results[i].d = scheduling.Decision{Cluster: r.Cluster, Why: "decided before this step was retried"}
				continue
			}
			req := p.req
			req.Last = led.Last
			d, err := scheduling.Schedule(views, req)
			if err != nil {
				results[i].err = planError("%s", err)
				continue
			}
			results[i].d = d
			if d.Cluster == "" {
				continue
			}
			if req.Scheduler == scheduling.RoundRobin {
				led.Last = d.Cluster
			}
			led.Reserved[p.inst.Name] = reservation{UID: p.inst.UID, Cluster: d.Cluster, Demand: req.Demand, At: metav1.Now()}
			scheduling.Place(views, d.Cluster, req.Demand)
			reserved = true
		}
		if !reserved {
			return results, nil
		}
		written, err := s.writeLedger(ctx, cm, led)
		if err != nil || written {
			return results, err
		}
		if conflicts == maxLedgerConflicts {
			return nil, fmt.Errorf("the scheduling ledger of namespace %s kept changing under %d turns", namespace, conflicts)
		}
	}
}
