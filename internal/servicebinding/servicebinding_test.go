package servicebinding_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sbv1 "github.com/quartermaster/qm/crds/servicebinding/v1"
	"github.com/quartermaster/qm/internal/bindingusage"
	"github.com/quartermaster/qm/internal/servicebinding"
)

// cronJobs is the specification's example mapping, for CronJobs.
func cronJobs(version string) *sbv1.ClusterWorkloadResourceMapping {
	return &sbv1.ClusterWorkloadResourceMapping{
		ObjectMeta: metav1.ObjectMeta{Name: "cronjobs.batch"},
		Spec: sbv1.ClusterWorkloadResourceMappingSpec{Versions: []sbv1.ClusterWorkloadResourceMappingTemplate{{
			Version:     version,
			Annotations: ".spec.jobTemplate.spec.template.metadata.annotations",
			Containers: []sbv1.ClusterWorkloadResourceMappingContainer{
				{Path: ".spec.jobTemplate.spec.template.spec.containers[*]", Name: ".name", Env: ".env", VolumeMounts: ".volumeMounts"},
				{Path: ".spec.jobTemplate.spec.template.spec.initContainers[*]", Name: ".name", Env: ".env", VolumeMounts: ".volumeMounts"},
			},
			Volumes: ".spec.jobTemplate.spec.template.spec.volumes",
		}}},
	}
}

func TestPaths(t *testing.T) {
	cronJob := bindingusage.Paths{Labels: "spec.jobTemplate.spec.template.metadata.labels", Containers: "spec.jobTemplate.spec.template.spec.containers"}
	withTemplate := func(tmpl sbv1.ClusterWorkloadResourceMappingTemplate) *sbv1.ClusterWorkloadResourceMapping {
		return &sbv1.ClusterWorkloadResourceMapping{ObjectMeta: metav1.ObjectMeta{Name: "things.example.com"},
			Spec: sbv1.ClusterWorkloadResourceMappingSpec{Versions: []sbv1.ClusterWorkloadResourceMappingTemplate{tmpl}}}
	}
	for _, tc := range []struct {
		name    string
		mapping *sbv1.ClusterWorkloadResourceMapping
		version string
		want    bindingusage.Paths
		err     string
	}{
		{name: "no mapping: a PodSpec-able workload", want: servicebinding.DefaultPaths},
		{name: "the specification's CronJob example", mapping: cronJobs("v1"), version: "v1", want: cronJob},
		{name: "a wildcard version", mapping: cronJobs("*"), version: "v2", want: cronJob},
		{name: "a version the mapping does not list: the defaults", mapping: cronJobs("v1"), version: "v2", want: servicebinding.DefaultPaths},
		{name: "only containers: the rest beside them",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.run.template.spec.containers[*]"}}}),
			want: bindingusage.Paths{Labels: "spec.template.metadata.labels", Containers: "spec.run.template.spec.containers"}},
		{name: "a container's env elsewhere is not supported",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.containers[*]", Env: ".environment"}}}),
			err: "ClusterWorkloadResourceMapping things.example.com: container field .environment: Quartermaster supports a container's .env only"},
		{name: "volumes away from the containers are not supported",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.pod.containers[*]"}}, Volumes: ".spec.volumes"}),
			err: "volumes .spec.volumes: Quartermaster needs them beside the containers, at .spec.pod.volumes"},
		{name: "two lists of containers are not supported",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.a[*]"}, {Path: ".spec.b[*]"}}}),
			err: "2 lists of containers: Quartermaster projects into one"},
		{name: "a path that is not fixed",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.pods[0].containers[*]"}}}),
			err: ".spec.pods[0].containers[*] is not a fixed JSONPath of field names"},
		{name: "a containers path that is not a list",
			mapping: withTemplate(sbv1.ClusterWorkloadResourceMappingTemplate{Version: "*",
				Containers: []sbv1.ClusterWorkloadResourceMappingContainer{{Path: ".spec.container"}}}),
			err: ".spec.container does not end with [*]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := servicebinding.Paths(tc.mapping, tc.version)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestInjection(t *testing.T) {
	sb := func(spec sbv1.ServiceBindingSpec) *sbv1.ServiceBinding {
		return &sbv1.ServiceBinding{ObjectMeta: metav1.ObjectMeta{Name: "account-db"}, Spec: spec}
	}
	for _, tc := range []struct {
		name string
		sb   *sbv1.ServiceBinding
		want bindingusage.Injection
	}{
		{name: "the directory is the ServiceBinding's name; no variables but those asked for",
			sb: sb(sbv1.ServiceBindingSpec{}),
			want: bindingusage.Injection{Usage: "sb-account-db", Binding: "account-db", Secret: "creds", Keys: []string{"host"}, Hash: "h",
				Env: []bindingusage.EnvVar{}, Volume: true, Type: "postgresql", Provider: "quartermaster"}},
		{name: "spec.name, spec.env, the containers, and spec.type over the service's",
			sb: sb(sbv1.ServiceBindingSpec{Name: "db", Type: "mysql", Env: []sbv1.EnvMapping{{Name: "DB_HOST", Key: "host"}},
				Workload: sbv1.ServiceBindingWorkloadReference{Containers: []string{"app"}}}),
			want: bindingusage.Injection{Usage: "sb-account-db", Binding: "db", Secret: "creds", Keys: []string{"host"}, Hash: "h",
				Env: []bindingusage.EnvVar{{Name: "DB_HOST", Key: "host"}}, Containers: []string{"app"}, Volume: true, Type: "mysql", Provider: "quartermaster"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, servicebinding.Injection(tc.sb, "creds", []string{"host"}, "h", "postgresql", "quartermaster"))
		})
	}
}

func TestServiceSecret(t *testing.T) {
	obj := func(apiVersion, kind string, status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": "db"}}}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	for _, tc := range []struct {
		name    string
		service *unstructured.Unstructured
		secret  string
		why     string
	}{
		{"a Secret is its own", obj("v1", "Secret", nil), "db", ""},
		{"a Provisioned Service names one", obj("osb.servicefabrik.io/v1alpha1", "SFServiceBinding", map[string]any{"binding": map[string]any{"name": "qm-credentials-db"}}), "qm-credentials-db", ""},
		{"one not ready yet names none", obj("example.com/v1", "Database", map[string]any{"phase": "creating"}), "",
			"Database db has no status.binding.name yet: it is not a Provisioned Service, or it is not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret, why := servicebinding.ServiceSecret(tc.service)
			assert.Equal(t, tc.secret, secret)
			assert.Equal(t, tc.why, why)
		})
	}
}

func TestConditions(t *testing.T) {
	status := func(cs []metav1.Condition) map[string]string {
		out := map[string]string{}
		for _, c := range cs {
			out[c.Type] = string(c.Status) + " " + c.Reason
		}
		return out
	}
	assert.Equal(t, map[string]string{"Ready": "True Projected", "ServiceAvailable": "True ResolvedBindingSecret", "WorkloadProjected": "True Projected"},
		status(servicebinding.Conditions(2, nil, "creds", 1)))
	assert.Equal(t, map[string]string{"Ready": "False SecretNotFound", "ServiceAvailable": "False SecretNotFound", "WorkloadProjected": "False ServiceNotAvailable"},
		status(servicebinding.Conditions(2, &servicebinding.Problem{Reason: "SecretNotFound", Message: "gone", Service: true}, "creds", 1)))
	assert.Equal(t, map[string]string{"Ready": "False Conflict", "ServiceAvailable": "True ResolvedBindingSecret", "WorkloadProjected": "False Conflict"},
		status(servicebinding.Conditions(2, &servicebinding.Problem{Reason: "Conflict", Message: "a volume"}, "creds", 1)))
	for _, c := range servicebinding.Conditions(7, nil, "creds", 1) {
		assert.Equal(t, int64(7), c.ObservedGeneration)
	}
}
