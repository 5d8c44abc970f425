package clusters

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/tenancy"
)

// asKey names a client that acts as a ServiceAccount on a cluster: the
// cluster's configuration (a new one each time its Secret changes) and
// the account.
type asKey struct {
	config *rest.Config
	as     tenancy.Identity
}

// As returns a client of cluster that acts as the ServiceAccount id, by
// impersonation, so that the cluster's own RBAC decides what a plan may
// do there. The worker's credentials must allow impersonating
// serviceaccounts. Clients are kept per cluster configuration and account.
func (c *Clients) As(cluster Cluster, id tenancy.Identity) (client.Client, error) {
	if cluster.Config == nil {
		return nil, fmt.Errorf("acting as %s: no configuration of cluster %s to impersonate with", id, cluster.Name)
	}
	key := asKey{config: cluster.Config, as: id}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.as[key]; ok {
		return cl, nil
	}
	cfg := rest.CopyConfig(cluster.Config)
	// Groups are left to the API server, which gives an impersonated
	// ServiceAccount its own (system:serviceaccounts and that of its
	// namespace), as it would have them itself.
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.UserName()}
	opts := client.Options{Scheme: c.Scheme}
	if cluster.HTTP != nil {
		// Impersonation is a header: the cluster's connections serve it.
		opts.HTTPClient = cluster.HTTP
	}
	cl, err := client.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("building a client of cluster %s acting as %s: %w", cluster.Name, id, err)
	}
	if c.as == nil {
		c.as = map[asKey]client.Client{}
	}
	c.as[key] = cl
	return cl, nil
}
