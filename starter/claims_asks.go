package starter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/quartermaster/qm/workflows/runs"
)

// askWindow is how long the watcher gathers the asks for new claims of one
// namespace before it sends them to the namespace's allocator in one
// signal.
const askWindow = 20 * time.Millisecond

// asks gathers the watcher's asks for new claims, per namespace, into one
// signal every askWindow (runs.SignalClaimsWant): a burst of a thousand
// claims would otherwise send the namespace's one allocator a thousand
// signals in a few seconds, each a write of its history, in turn. Each ask
// waits for its signal and returns its error, so that a reconcile whose
// ask failed is retried.
type asks struct {
	temporal client.Client

	mu   sync.Mutex
	open map[string]*askBatch // by namespace
}

// askBatch is the asks of one namespace that go in one signal.
type askBatch struct {
	names []string
	sent  chan struct{}
	err   error
}

func newAsks(tc client.Client) *asks {
	return &asks{temporal: tc, open: map[string]*askBatch{}}
}

// ask asks the allocator of namespace for a service for the claim name,
// starting the allocator if it does not run.
func (a *asks) ask(ctx context.Context, namespace, name string) error {
	a.mu.Lock()
	b := a.open[namespace]
	if b == nil {
		b = &askBatch{sent: make(chan struct{})}
		a.open[namespace] = b
		time.AfterFunc(askWindow, func() { a.send(namespace, b) })
	}
	b.names = append(b.names, name)
	a.mu.Unlock()
	select {
	case <-b.sent:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send closes the batch b of namespace and signals its names.
func (a *asks) send(namespace string, b *askBatch) {
	a.mu.Lock()
	delete(a.open, namespace)
	a.mu.Unlock()
	_, err := a.temporal.SignalWithStartWorkflow(context.Background(), runs.AllocatorID(namespace), runs.SignalClaimsWant, b.names,
		runs.AllocatorOptions(namespace), runs.AllocatorType, namespace, []string(nil))
	if err != nil {
		b.err = fmt.Errorf("asking the allocator of %s for services for %d claims: %w", namespace, len(b.names), err)
	}
	close(b.sent)
}
