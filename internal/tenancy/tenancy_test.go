package tenancy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/quartermaster/qm/internal/tenancy"
)

type offering struct{ ns, name string }

func names(os []offering) []string {
	out := []string{}
	for _, o := range os {
		out = append(out, o.ns+"/"+o.name)
	}
	return out
}

func TestServed(t *testing.T) {
	b := tenancy.Boundary{Catalog: []string{"broker", "platform"}}
	cases := []struct {
		name      string
		namespace string
		items     []offering
		want      []string
	}{
		{"a catalog plan serves every namespace", "tenant-a", []offering{{"broker", "p"}}, []string{"broker/p"}},
		{"a tenant's own plan serves its namespace", "tenant-a", []offering{{"tenant-a", "p"}}, []string{"tenant-a/p"}},
		{"another tenant's plan serves nobody else", "tenant-b", []offering{{"tenant-a", "p"}}, []string{}},
		{"the catalog's wins over a tenant's copy", "tenant-a", []offering{{"tenant-a", "copy"}, {"broker", "p"}}, []string{"broker/p"}},
		{"the catalog's wins in the catalog namespace too", "broker", []offering{{"tenant-a", "copy"}, {"broker", "p"}}, []string{"broker/p"}},
		{"two catalog copies are both returned (a conflict)", "tenant-a", []offering{{"broker", "p"}, {"platform", "q"}}, []string{"broker/p", "platform/q"}},
		{"two copies of one tenant are both returned", "tenant-a", []offering{{"tenant-a", "p"}, {"tenant-a", "q"}, {"tenant-b", "r"}}, []string{"tenant-a/p", "tenant-a/q"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := tenancy.Served(b, c.namespace, c.items, func(o offering) string { return o.ns })
			assert.Equal(t, c.want, names(got))
		})
	}
}

func TestActsAs(t *testing.T) {
	b := tenancy.Boundary{Catalog: []string{"broker"}}
	id, ok := b.ActsAs("broker", "")
	assert.False(t, ok, "a catalog plan that names no ServiceAccount acts as the worker")
	assert.Equal(t, tenancy.Identity{}, id)

	id, ok = b.ActsAs("broker", "restricted")
	assert.True(t, ok)
	assert.Equal(t, "system:serviceaccount:broker:restricted", id.UserName())

	id, ok = b.ActsAs("tenant-a", "")
	assert.True(t, ok, "a tenant's plan always acts as a ServiceAccount of its namespace")
	assert.Equal(t, "system:serviceaccount:tenant-a:"+tenancy.DefaultServiceAccount, id.UserName())

	id, ok = b.ActsAs("tenant-a", "deployer")
	assert.True(t, ok)
	assert.Equal(t, "tenant-a/deployer", id.String())
}

func object(kind, ns, name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(annotations)
	return u
}

func TestCheckScope(t *testing.T) {
	namespaced := func(u *unstructured.Unstructured) (bool, error) {
		return u.GetKind() != "ClusterRole" && u.GetKind() != "Namespace", nil
	}
	cases := []struct {
		name string
		obj  *unstructured.Unstructured
		want string // "" for none
	}{
		{"an object without a namespace goes to the instance's", object("ConfigMap", "", "c", nil), ""},
		{"an object in the instance's namespace", object("ConfigMap", "tenant-a", "c", nil), ""},
		{"a cluster-scoped object", object("ClusterRole", "", "all", nil), "ClusterRole all: it is cluster-scoped"},
		{"another namespace", object("ConfigMap", "kube-system", "c", nil), "ConfigMap c: it is in namespace kube-system, not the instance's tenant-a"},
		{"a shared singleton", object("ConfigMap", "", "c", map[string]string{"quartermaster.io/singleton": "true"}), "a tenant's plan may not declare a shared singleton"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := tenancy.CheckScope("tenant-a", []*unstructured.Unstructured{object("Secret", "", "first", nil), c.obj}, namespaced)
			if c.want == "" {
				assert.NoError(t, err)
				return
			}
			var out *tenancy.OutOfScope
			require.ErrorAs(t, err, &out)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestCheckKubeconfig(t *testing.T) {
	safe := func() *clientcmdapi.Config {
		return &clientcmdapi.Config{
			Clusters:  map[string]*clientcmdapi.Cluster{"c": {Server: "https://10.0.0.1", CertificateAuthorityData: []byte("ca")}},
			AuthInfos: map[string]*clientcmdapi.AuthInfo{"u": {Token: "t"}},
		}
	}
	cases := []struct {
		name          string
		edit          func(*clientcmdapi.Config)
		allowInsecure bool
		field         string // "" for none
	}{
		{"inline credentials", func(*clientcmdapi.Config) {}, false, ""},
		{"exec", func(c *clientcmdapi.Config) { c.AuthInfos["u"].Exec = &clientcmdapi.ExecConfig{Command: "sh"} }, false, "exec"},
		{"auth-provider", func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, false, "auth-provider"},
		{"tokenFile", func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}, false, "tokenFile"},
		{"client-certificate", func(c *clientcmdapi.Config) { c.AuthInfos["u"].ClientCertificate = "/etc/cert" }, false, "client-certificate"},
		{"client-key", func(c *clientcmdapi.Config) { c.AuthInfos["u"].ClientKey = "/etc/key" }, false, "client-key"},
		{"certificate-authority", func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthority = "/etc/ca" }, false, "certificate-authority"},
		{"proxy-url", func(c *clientcmdapi.Config) { c.Clusters["c"].ProxyURL = "http://evil:3128" }, false, "proxy-url"},
		{"insecure, not allowed", func(c *clientcmdapi.Config) { c.Clusters["c"].InsecureSkipTLSVerify = true }, false, "insecure-skip-tls-verify"},
		{"insecure, allowed", func(c *clientcmdapi.Config) { c.Clusters["c"].InsecureSkipTLSVerify = true }, true, ""},
		{"an unused user is checked too", func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "sh"}}
		}, false, "exec"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := safe()
			c.edit(cfg)
			err := tenancy.CheckKubeconfig(cfg, c.allowInsecure)
			if c.field == "" {
				assert.NoError(t, err)
				return
			}
			var unsafe *tenancy.UnsafeKubeconfig
			require.ErrorAs(t, err, &unsafe)
			assert.Equal(t, c.field, unsafe.Field)
			assert.Contains(t, err.Error(), c.field)
		})
	}
}
