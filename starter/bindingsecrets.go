package starter

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
	"github.com/quartermaster/qm/internal/informers"
	"github.com/quartermaster/qm/internal/kubenames"
)

// credentialsSettle is how long after a binding's credentials Secret
// came, changed or went a sharded first shard wakes the binding's
// readers: the binding's status names the Secret just after it is
// written.
const credentialsSettle = time.Second

// bindingSecrets is how the readers of Secrets (usages, ServiceBindings,
// claims) watch them. A whole watcher's cache holds every Secret's
// metadata, registries aside, and a reader's sources go on it.
//
// A sharded first shard holds neither the other shards' bindings nor, in
// that cache, any binding's credentials Secret (one per binding: most of
// the Secrets there are). It watches those Secrets only in the namespaces
// where a reader is, each namespace in a cache of its own started by the
// first reader there (ensure): a reader reads the Secrets of its own
// namespace only, and a platform's bindings (the broker's namespace)
// usually have none. There a credentials Secret also stands for its
// binding: it carries the binding's name, so that a reader waiting for a
// binding another shard owns wakes when the binding's credentials come.
type bindingSecrets struct {
	mgr ctrl.Manager
	// sharded is false for a whole watcher: no namespace needs a cache.
	sharded bool

	mu      sync.Mutex
	readers []secretReader
	watched map[string]*namespaceSecrets
}

// namespaceSecrets is one namespace's cache of credentials Secrets and how
// many of the readers watch it so far: an ensure that failed halfway is
// taken up again where it stopped, on the same cache, rather than adding
// another cache to the manager (each one a watch of its own that never
// stops).
type namespaceSecrets struct {
	cache   cache.Cache
	readers int
}

// secretReader is one controller's sources of Secrets, made on a cache,
// and, for the readers of bindings, the handler that maps a binding's key
// ("SFServiceBinding/name") to them.
type secretReader struct {
	ctl       controller.Controller
	sources   func(c cache.Cache) []source.Source
	byBinding func(key func(ctrlclient.Object) string) handler.EventHandler
}

// newBindingSecrets is the bindingSecrets of a watcher, sharded or not.
func newBindingSecrets(mgr ctrl.Manager, sharded bool) *bindingSecrets {
	return &bindingSecrets{mgr: mgr, sharded: sharded, watched: map[string]*namespaceSecrets{}}
}

// read has ctl watch the Secrets that sources make, in the watcher's cache
// now and in each namespace's cache of credentials as it starts.
func (b *bindingSecrets) read(ctl controller.Controller, r secretReader) error {
	r.ctl = ctl
	for _, src := range r.sources(b.mgr.GetCache()) {
		if err := ctl.Watch(src); err != nil {
			return fmt.Errorf("watching Secrets: %w", err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readers = append(b.readers, r)
	return nil
}

// ensure watches the credentials Secrets of ns for every reader, once; a
// whole watcher's cache has them already. The watch stays when the
// namespace's last reader goes: a namespace that had readers usually has
// them again, and the watcher's restart drops it.
func (b *bindingSecrets) ensure(ns string) error {
	if !b.sharded {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.watched[ns]
	if w == nil {
		c, err := cache.New(b.mgr.GetConfig(), cache.Options{Scheme: crds.NewScheme(), NewInformer: informers.New,
			DefaultNamespaces: map[string]cache.Config{ns: {}}, DefaultLabelSelector: credentialsSelector(),
			DefaultTransform: cache.TransformStripManagedFields()})
		if err != nil {
			return fmt.Errorf("creating the cache of the credentials Secrets of %s: %w", ns, err)
		}
		if err := b.mgr.Add(c); err != nil {
			return fmt.Errorf("adding the cache of the credentials Secrets of %s: %w", ns, err)
		}
		w = &namespaceSecrets{cache: c}
		b.watched[ns] = w
	}
	for ; w.readers < len(b.readers); w.readers++ {
		if err := b.readers[w.readers].watch(w.cache); err != nil {
			return fmt.Errorf("watching the credentials Secrets of %s: %w", ns, err)
		}
	}
	return nil
}

// watch has the reader watch the Secrets of the cache c. A retry after a
// failure watches the reader's sources again, those that took too: a
// source watched twice enqueues the same keys twice, which the
// controller's queue merges.
func (r secretReader) watch(c cache.Cache) error {
	sources := r.sources(c)
	if r.byBinding != nil {
		sources = append(sources, source.Kind[ctrlclient.Object](c, ctrlclient.Object(secretsMetadata()),
			enqueueAfter(r.byBinding(credentialsOf), credentialsSettle)))
	}
	for _, src := range sources {
		if err := r.ctl.Watch(src); err != nil {
			return err
		}
	}
	return nil
}

// credentialsOf is the key of the binding whose credentials a Secret
// holds, "" for another Secret.
func credentialsOf(o ctrlclient.Object) string {
	if name := kubenames.NameOf(o, osbv1alpha1.CredentialsBindingLabel); name != "" {
		return bindingKey(sc.BindingReference{Kind: sc.BindingKindSFServiceBinding, Name: name})
	}
	return ""
}

// credentialsSelector selects the bindings' credentials Secrets.
func credentialsSelector() labels.Selector {
	return labels.NewSelector().Add(credentialsLabel(selection.Exists))
}

// credentialsLabel is the requirement on a Secret's binding label: Exists
// for a binding's credentials, DoesNotExist for any other Secret.
func credentialsLabel(op selection.Operator) labels.Requirement {
	req, err := labels.NewRequirement(osbv1alpha1.CredentialsBindingLabel, op, nil)
	if err != nil {
		// The label is a constant; both operators take no value.
		panic(fmt.Sprintf("the requirement on a Secret's binding label: %v", err))
	}
	return *req
}
