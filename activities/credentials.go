package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/kubenames"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
)

// credentialsName is the Secret that holds a binding's credentials.
func credentialsName(b *osbv1alpha1.SFServiceBinding) string {
	return kubenames.Bounded("qm-credentials-", b.Name)
}

// storeCredentials keeps a binding's credentials in its registry and in the
// Secret that status.response.secretRef names, and the rest of the bind
// response (endpoints, volume mounts, URLs, metadata) in the status.
// Without credentials in the bind response (or without a response), those
// the registry holds are used.
func (a *Operations) storeCredentials(ctx context.Context, t *target, reg *registry.Registry, regSecret *corev1.Secret, response *plan.BindResponse) error {
	if response == nil {
		response = &plan.BindResponse{}
	}
	creds := response.Credentials
	if creds == nil {
		if v, _ := reg.Get(registry.KeyCredentials); v != nil {
			creds, _ = v.(map[string]any)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentialsName(t.binding), Namespace: t.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, t.kube, secret, func() error {
		secret.Data = map[string][]byte{}
		var jsonKeys []string
		for k, v := range creds {
			if s, ok := v.(string); ok {
				secret.Data[k] = []byte(s)
				continue
			}
			raw, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("credential %q: %w", k, err)
			}
			secret.Data[k] = raw
			jsonKeys = append(jsonKeys, k)
		}
		slices.Sort(jsonKeys)
		if len(jsonKeys) > 0 {
			secret.Annotations = map[string]string{osbv1alpha1.CredentialsJSONKeysAnnotation: strings.Join(jsonKeys, ",")}
		} else {
			delete(secret.Annotations, osbv1alpha1.CredentialsJSONKeysAnnotation)
		}
		secret.Labels = nil
		kubenames.SetLabel(secret, osbv1alpha1.CredentialsBindingLabel, t.binding.Name)
		if t.remote {
			return nil // the binding is in another cluster: unbind deletes the Secret
		}
		return controllerutil.SetOwnerReference(t.binding, secret, a.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("writing the credentials Secret %s/%s: %w", t.Namespace, secret.Name, err)
	}
	if creds != nil {
		if err := a.setInRegistry(ctx, t, reg, regSecret, registry.KeyCredentials, creds); err != nil {
			return err
		}
	}
	return a.patchStatus(ctx, t, func(s *status) {
		s.BindingResponse = osbv1alpha1.BindingResponse{
			SecretRef:       secret.Name,
			Endpoints:       response.Endpoints,
			SyslogDrainURL:  response.SyslogDrainURL,
			RouteServiceURL: response.RouteServiceURL,
			Metadata:        response.Metadata,
		}
		if len(response.VolumeMounts) > 0 {
			s.BindingResponse.VolumeMounts = &apiextensionsv1.JSON{Raw: response.VolumeMounts}
		}
	})
}
