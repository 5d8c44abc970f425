package tenancy

import (
	"fmt"
	"maps"
	"slices"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// UnsafeKubeconfig is the error of an SFCluster's kubeconfig that would
// have Quartermaster run a program, read a file of its own pod (such as
// its ServiceAccount token) or send its requests through a proxy of the
// kubeconfig's choice. Field is the kubeconfig's field, as kubectl spells
// it.
type UnsafeKubeconfig struct {
	Field, Entry string
}

func (e *UnsafeKubeconfig) Error() string {
	if e.Field == "insecure-skip-tls-verify" {
		return fmt.Sprintf("the kubeconfig sets insecure-skip-tls-verify (in %s), which Quartermaster uses only where the SFCluster sets spec.allowInsecureSkipTLSVerify: true", e.Entry)
	}
	return fmt.Sprintf("the kubeconfig sets %s (in %s), which Quartermaster refuses: an SFCluster's kubeconfig carries its credentials inline (token, client-certificate-data, certificate-authority-data)", e.Field, e.Entry)
}

// CheckKubeconfig refuses a kubeconfig that sets exec, auth-provider,
// tokenFile, a file path for a certificate or key, or proxy-url, and
// insecure-skip-tls-verify unless allowInsecure (the SFCluster says so
// explicitly). Entries are checked in name order, so the error is always
// the same for the same kubeconfig.
func CheckKubeconfig(cfg *clientcmdapi.Config, allowInsecure bool) error {
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		u, entry := cfg.AuthInfos[name], "user "+name
		switch {
		case u == nil:
		case u.Exec != nil:
			return &UnsafeKubeconfig{Field: "exec", Entry: entry}
		case u.AuthProvider != nil:
			return &UnsafeKubeconfig{Field: "auth-provider", Entry: entry}
		case u.TokenFile != "":
			return &UnsafeKubeconfig{Field: "tokenFile", Entry: entry}
		case u.ClientCertificate != "":
			return &UnsafeKubeconfig{Field: "client-certificate", Entry: entry}
		case u.ClientKey != "":
			return &UnsafeKubeconfig{Field: "client-key", Entry: entry}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		c, entry := cfg.Clusters[name], "cluster "+name
		switch {
		case c == nil:
		case c.CertificateAuthority != "":
			return &UnsafeKubeconfig{Field: "certificate-authority", Entry: entry}
		case c.ProxyURL != "":
			return &UnsafeKubeconfig{Field: "proxy-url", Entry: entry}
		case c.InsecureSkipTLSVerify && !allowInsecure:
			return &UnsafeKubeconfig{Field: "insecure-skip-tls-verify", Entry: entry}
		}
	}
	return nil
}
