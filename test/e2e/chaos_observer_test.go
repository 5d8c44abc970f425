package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/chaos"
)

// observer is what the chaos run sees of the resources while it runs: the
// generated passwords as first seen (and which changed), and when each
// operation completed. An operation completed when its resource shows a
// new generation succeeded (provision, update, bind) or is gone
// (deprovision, unbind).
type observer struct {
	mu          sync.Mutex
	passwords   map[string]string
	changed     map[string]bool // the Secrets whose password changed
	completions []time.Time
	// noted is what completed when, a line each, for the run's kept
	// timeline (keep).
	noted   []string
	lastGen map[string]int64
	present map[string]bool
	// completed is closed, and replaced, when a completion is noted.
	completed chan struct{}
}

// look lists the chaos namespace's Secrets, instances and bindings once,
// and notes what changed since the last look; it notes nothing while the
// API server is down.
func (o *observer) look(ctx context.Context, kube ctrlclient.Client) {
	var secrets corev1.SecretList
	var insts osbv1alpha1.SFServiceInstanceList
	var binds osbv1alpha1.SFServiceBindingList
	if kube.List(ctx, &secrets, ctrlclient.InNamespace(chaosNamespace), ctrlclient.MatchingLabels{"app": "chaos"}) != nil ||
		kube.List(ctx, &insts, ctrlclient.InNamespace(chaosNamespace)) != nil ||
		kube.List(ctx, &binds, ctrlclient.InNamespace(chaosNamespace)) != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	before := len(o.completions)
	for _, s := range secrets.Items {
		p := string(s.Data["password"])
		if first, ok := o.passwords[s.Name]; ok && first != p && s.DeletionTimestamp == nil {
			o.changed[s.Name] = true
		} else if !ok && p != "" {
			o.passwords[s.Name] = p
		}
	}
	now, seen := time.Now(), map[string]bool{}
	note := func(what string) {
		o.completions = append(o.completions, now)
		o.noted = append(o.noted, fmt.Sprintf("%s %s", now.Format(timelineFormat), what))
	}
	observe := func(key string, state osbv1alpha1.OperationState, gen int64) {
		seen[key] = true
		if state == osbv1alpha1.StateSucceeded && gen > o.lastGen[key] {
			o.lastGen[key] = gen
			note(fmt.Sprintf("%s succeeded at generation %d", key, gen))
		}
	}
	for _, i := range insts.Items {
		observe("instance "+i.Name, i.Status.State, i.Status.ObservedGeneration)
	}
	for _, b := range binds.Items {
		observe("binding "+b.Name, b.Status.State, b.Status.ObservedGeneration)
	}
	for key := range o.present {
		if !seen[key] {
			note(key + " is gone")
		}
	}
	o.present = seen
	if len(o.completions) > before {
		close(o.completed)
		o.completed = make(chan struct{})
	}
}

// awaitRecovery returns once the next fault is due after prev
// (chaos.Due): an operation completed after prev ended, or window passed
// since. It wakes on each completion the observer notes.
func (o *observer) awaitRecovery(prev *chaos.Struck, window time.Duration) {
	if prev == nil {
		return
	}
	windowEnds := time.NewTimer(time.Until(prev.End.Add(window)))
	defer windowEnds.Stop()
	for {
		o.mu.Lock()
		due, completed := chaos.Due(prev, o.completions, time.Now(), window), o.completed
		o.mu.Unlock()
		if due {
			return
		}
		select {
		case <-completed:
		case <-windowEnds.C:
			return
		}
	}
}
