package serviceclass_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/serviceclass"
)

// database is a resource of a class: a third party's Database.
func database() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Database",
		"metadata": map[string]any{"name": "orders", "namespace": "apps"},
		"spec":     map[string]any{"host": "orders.db", "port": int64(5432), "user": "app", "credentials": "orders-creds", "replicas": []any{"a", "b"}},
	}}
}

// class maps the Database's host and port (the port in clear), and its
// password from the Secret it names.
func class(edit func(*primazav1alpha1.ServiceClassSpec)) *primazav1alpha1.ServiceClass {
	c := &primazav1alpha1.ServiceClass{Spec: primazav1alpha1.ServiceClassSpec{
		Resource: primazav1alpha1.ServiceClassResource{APIVersion: "example.com/v1", Kind: "Database",
			ServiceEndpointDefinitionMappings: primazav1alpha1.ServiceEndpointDefinitionMappings{
				ResourceFields: []primazav1alpha1.ResourceFieldMapping{
					{Name: "host", JSONPath: ".spec.host"},
					{Name: "port", JSONPath: "{.spec.port}", Secret: ptr.To(false)},
				},
				SecretRefFields: []primazav1alpha1.SecretRefFieldMapping{{Name: "password",
					SecretName: primazav1alpha1.ValueSource{JSONPath: ptr.To(".spec.credentials")},
					SecretKey:  primazav1alpha1.ValueSource{Constant: ptr.To("password")}}},
			}},
		ServiceClassIdentity: []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}},
		Constraints:          &primazav1alpha1.Constraints{Environments: []string{"dev"}},
	}}
	if edit != nil {
		edit(&c.Spec)
	}
	return c
}

// secrets holds orders-creds with the key password.
func secrets(name, key string) error {
	if name == "orders-creds" && key == "password" {
		return nil
	}
	return errors.New("Secret " + name + " has no key " + key)
}

func TestRegister(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class *primazav1alpha1.ServiceClass
		want  serviceclass.Registration
		err   string
	}{
		{name: "fields, a secret one by default, and a linked Secret by reference", class: class(nil), want: serviceclass.Registration{
			Name: "database-orders",
			Spec: primazav1alpha1.RegisteredServiceSpec{
				ServiceClassIdentity: []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}},
				Constraints:          &primazav1alpha1.Constraints{Environments: []string{"dev"}},
				ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{
					{Name: "host", ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: "database-orders", Key: "host"}},
					{Name: "port", Value: ptr.To("5432")},
					{Name: "password", ValueFromSecret: &primazav1alpha1.SecretKeyRef{Name: "orders-creds", Key: "password"}},
				},
			},
			Secret: map[string][]byte{"host": []byte("orders.db")},
		}},
		{name: "the class's health check runs its command in a shell", class: class(func(s *primazav1alpha1.ServiceClassSpec) {
			s.HealthCheck = &primazav1alpha1.ServiceClassHealthCheck{Container: primazav1alpha1.ServiceClassCheckContainer{Image: "postgres:16", Command: "pg_isready"}}
			s.Resource.ServiceEndpointDefinitionMappings.SecretRefFields = nil
			s.Resource.ServiceEndpointDefinitionMappings.ResourceFields = s.Resource.ServiceEndpointDefinitionMappings.ResourceFields[1:]
		}), want: serviceclass.Registration{
			Name: "database-orders",
			Spec: primazav1alpha1.RegisteredServiceSpec{
				ServiceClassIdentity:      []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "psqlserver"}},
				Constraints:               &primazav1alpha1.Constraints{Environments: []string{"dev"}},
				ServiceEndpointDefinition: []primazav1alpha1.ServiceEndpointDefinitionItem{{Name: "port", Value: ptr.To("5432")}},
				HealthCheck: &primazav1alpha1.HealthCheck{Container: &primazav1alpha1.HealthCheckContainer{
					Image: "postgres:16", Command: []string{"sh", "-c", "pg_isready"}, EndpointEnv: true, Minutes: 5, TimeoutSeconds: 60},
					FailureThreshold: 1, SuccessThreshold: 1},
			},
		}},
		{name: "a field the resource does not have", class: class(func(s *primazav1alpha1.ServiceClassSpec) {
			s.Resource.ServiceEndpointDefinitionMappings.ResourceFields[0].JSONPath = ".status.host"
		}), err: "Database orders: host: jsonPath .status.host finds nothing: status is not found"},
		{name: "a path to several values", class: class(func(s *primazav1alpha1.ServiceClassSpec) {
			s.Resource.ServiceEndpointDefinitionMappings.ResourceFields[0].JSONPath = ".spec.replicas[*]"
		}), err: "Database orders: host: jsonPath .spec.replicas[*] finds 2 values, not one"},
		{name: "a linked Secret without the key", class: class(func(s *primazav1alpha1.ServiceClassSpec) {
			s.Resource.ServiceEndpointDefinitionMappings.SecretRefFields[0].SecretKey = primazav1alpha1.ValueSource{Constant: ptr.To("pw")}
		}), err: "Database orders: password: Secret orders-creds has no key pw"},
		{name: "no mapping at all", class: class(func(s *primazav1alpha1.ServiceClassSpec) {
			s.Resource.ServiceEndpointDefinitionMappings = primazav1alpha1.ServiceEndpointDefinitionMappings{}
		}), err: "Database orders: the class maps no endpoint definition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serviceclass.Register(tc.class, database(), secrets)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSelector(t *testing.T) {
	for _, tc := range []struct {
		name, selector string
		want           bool
		err            string
	}{
		{name: "none: every resource", want: true},
		{name: "a field that matches", selector: "spec.host=orders.db", want: true},
		{name: "a field that does not", selector: "spec.host=other.db"},
		{name: "every requirement must hold", selector: "spec.host=orders.db,spec.user!=app"},
		{name: "a number, as text", selector: "spec.port=5432", want: true},
		{name: "a field the resource lacks is empty", selector: "status.state!=failed", want: true},
		{name: "metadata too", selector: "metadata.name==orders", want: true},
		{name: "a selector that does not parse", selector: "spec.host~orders", err: `fieldSelector "spec.host~orders" does not parse: invalid selector: 'spec.host~orders'; can't understand 'spec.host~orders'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := class(func(s *primazav1alpha1.ServiceClassSpec) { s.Resource.FieldSelector = tc.selector })
			selects, err := serviceclass.Selector(c)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, selects(database()))
		})
	}
}
