package activities

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/healthcheck"
)

// probe builds the tcp or http probe of svc, with its endpoint definition
// and CA bundle read from their Secrets.
func (h *HealthChecks) probe(ctx context.Context, svc *primazav1alpha1.RegisteredService, hc *primazav1alpha1.HealthCheck) (healthcheck.Probe, error) {
	p := healthcheck.Probe{Check: hc, Endpoint: healthcheck.Endpoint{}, FromSecret: map[string]bool{}}
	for _, item := range svc.Spec.ServiceEndpointDefinition {
		switch {
		case item.Value != nil:
			p.Endpoint[item.Name] = *item.Value
		case item.ValueFromSecret != nil && needsItem(hc, item.Name):
			v, err := h.secretKey(ctx, svc.Namespace, item.ValueFromSecret)
			if err != nil {
				return p, err
			}
			if v != nil {
				p.Endpoint[item.Name] = string(v)
				p.FromSecret[item.Name] = true
			}
		}
	}
	if hc.HTTP != nil && hc.HTTP.CABundle != nil {
		v, err := h.secretKey(ctx, svc.Namespace, hc.HTTP.CABundle)
		if err != nil {
			return p, err
		}
		p.CABundle = v
	}
	return p, nil
}

// needsItem: the check reads endpoint item name.
func needsItem(hc *primazav1alpha1.HealthCheck, name string) bool {
	switch {
	case hc.TCP != nil && hc.TCP.FromEndpoint != nil:
		return name == hc.TCP.FromEndpoint.Host || name == hc.TCP.FromEndpoint.Port
	case hc.HTTP != nil && hc.HTTP.FromEndpoint != nil:
		return name == hc.HTTP.FromEndpoint.URL
	}
	return false
}

// secretKey reads one key of a Secret; a missing Secret or key is nil,
// which the probe reports as a check that could not run.
func (h *HealthChecks) secretKey(ctx context.Context, namespace string, ref *primazav1alpha1.SecretKeyRef) ([]byte, error) {
	var s corev1.Secret
	err := h.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: namespace, Name: ref.Name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
	}
	return s.Data[ref.Key], nil
}
