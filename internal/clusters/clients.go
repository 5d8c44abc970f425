// Package clusters reaches the clusters registered as SFClusters: it
// builds a client from the kubeconfig in each one's Secret, keeps it, and
// builds it again when the Secret changes. The cluster named "1" is the
// one Quartermaster runs in, reached with its own credentials.
package clusters

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/tenancy"
)

// KubeconfigKey is the key of an SFCluster's Secret that holds the
// cluster's kubeconfig, as in Service Fabrik.
const KubeconfigKey = "kubeconfig"

// DefaultTimeout bounds each request to a registered cluster, so that one
// that does not answer fails a step instead of hanging it.
const DefaultTimeout = 30 * time.Second

// Clients hands out clients of registered clusters.
type Clients struct {
	// Local reaches the cluster Quartermaster runs in, LocalConfig is its
	// configuration.
	Local       client.Client
	LocalConfig *rest.Config
	// Reader reads SFClusters and their Secrets; a live reader, so that no
	// cache of every Secret is needed.
	Reader client.Reader
	Scheme *runtime.Scheme
	// Timeout bounds each request to a registered cluster (0: DefaultTimeout).
	Timeout time.Duration

	// Catalog is the trust boundary: only SFClusters of the catalog
	// namespaces are used (none: every namespace's, for tests of the
	// clients alone).
	Catalog *tenancy.Boundary

	mu     sync.Mutex
	remote map[types.NamespacedName]remote
	as     map[asKey]client.Client
}

// Cluster is a cluster to work in.
type Cluster struct {
	Name string
	// SFCluster registers the cluster: nil for the cluster Quartermaster
	// runs in, which needs no registration.
	SFCluster *resourcev1alpha1.SFCluster
	Client    client.Client
	Config    *rest.Config
	// HTTP is Client's HTTP client, for other clients of the same cluster
	// to share its connections (nil: the cluster Quartermaster runs in).
	HTTP *http.Client
}

// remote is a client built from a Secret, and the Secret's version.
type remote struct {
	secret types.UID
	rv     string
	Cluster
}

// Untrusted is the error of an SFCluster outside the catalog namespaces:
// a tenant may not register a cluster, whose kubeconfig Quartermaster
// would use with its own reach.
type Untrusted struct {
	Namespace, Name string
}

func (e *Untrusted) Error() string {
	return fmt.Sprintf("SFCluster %s/%s is not used: SFClusters are trusted only in the catalog namespaces, and %s is not one",
		e.Namespace, e.Name, e.Namespace)
}

// IsLocal says whether name is the cluster Quartermaster runs in: the
// reserved name, or none (an instance from before scheduling).
func IsLocal(name string) bool {
	return name == "" || name == resourcev1alpha1.LocalCluster
}

// Get returns the cluster named name, whose SFCluster is in namespace.
func (c *Clients) Get(ctx context.Context, namespace, name string) (Cluster, error) {
	if IsLocal(name) {
		return Cluster{Name: resourcev1alpha1.LocalCluster, Client: c.Local, Config: c.LocalConfig}, nil
	}
	if c.Catalog != nil && !c.Catalog.Trusted(namespace) {
		return Cluster{}, &Untrusted{Namespace: namespace, Name: name}
	}
	var sfc resourcev1alpha1.SFCluster
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sfc); err != nil {
		if apierrors.IsNotFound(err) {
			return Cluster{}, fmt.Errorf("no SFCluster %q in namespace %s", name, namespace)
		}
		return Cluster{}, fmt.Errorf("reading SFCluster %s/%s: %w", namespace, name, err)
	}
	return c.ForSFCluster(ctx, &sfc)
}

// ForSFCluster returns a client of the cluster sfc registers.
func (c *Clients) ForSFCluster(ctx context.Context, sfc *resourcev1alpha1.SFCluster) (Cluster, error) {
	if IsLocal(sfc.Name) {
		return c.Get(ctx, sfc.Namespace, sfc.Name)
	}
	if c.Catalog != nil && !c.Catalog.Trusted(sfc.Namespace) {
		return Cluster{}, &Untrusted{Namespace: sfc.Namespace, Name: sfc.Name}
	}
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: sfc.Namespace, Name: sfc.Spec.SecretRef}
	if err := c.Reader.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return Cluster{}, fmt.Errorf("the SFCluster's Secret %s does not exist", key.Name)
		}
		return Cluster{}, fmt.Errorf("reading the SFCluster's Secret %s: %w", key.Name, err)
	}
	id := client.ObjectKeyFromObject(sfc)
	c.mu.Lock()
	r, ok := c.remote[id]
	c.mu.Unlock()
	if ok && r.secret == secret.UID && r.rv == secret.ResourceVersion {
		return r.with(sfc), nil
	}
	raw := secret.Data[KubeconfigKey]
	if len(raw) == 0 {
		return Cluster{}, fmt.Errorf("the SFCluster's Secret %s has no %q key", key.Name, KubeconfigKey)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		// The parser's message may quote the file; it is the operator's own
		// Secret, but it may hold a token, so it is not repeated.
		return Cluster{}, fmt.Errorf("the kubeconfig in Secret %s is not valid", key.Name)
	}
	// Checked before anything of it is used: an exec plugin would run
	// when the client is built, a token file would be read from the
	// worker's own pod.
	if err := tenancy.CheckKubeconfig(kc, sfc.Spec.AllowInsecureSkipTLSVerify); err != nil {
		return Cluster{}, fmt.Errorf("the kubeconfig in Secret %s: %w", key.Name, err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return Cluster{}, fmt.Errorf("the kubeconfig in Secret %s is not valid", key.Name)
	}
	cfg.Timeout = c.Timeout
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.QPS, cfg.Burst = -1, 0 // the worker's own rate, as for the local cluster
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return Cluster{}, fmt.Errorf("building a client of cluster %s: %w", sfc.Name, err)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: c.Scheme, HTTPClient: hc})
	if err != nil {
		return Cluster{}, fmt.Errorf("building a client of cluster %s: %w", sfc.Name, err)
	}
	r = remote{secret: secret.UID, rv: secret.ResourceVersion, Cluster: Cluster{Name: sfc.Name, Client: named(cl, sfc.Name), Config: cfg, HTTP: hc}}
	c.mu.Lock()
	if c.remote == nil {
		c.remote = map[types.NamespacedName]remote{}
	}
	c.remote[id] = r
	c.mu.Unlock()
	return r.with(sfc), nil
}

// with is the kept cluster with sfc as it was read now: its client is kept
// while the Secret is the same, but its labels and spec are as they are.
func (r remote) with(sfc *resourcev1alpha1.SFCluster) Cluster {
	c := r.Cluster
	c.SFCluster = sfc
	return c
}
