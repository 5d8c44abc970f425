package plan_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	resourcev1alpha1 "github.com/quartermaster/qm/crds/resource/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// seed reads one object of the seed fixtures, as a template sees it.
func seed(t *testing.T, file string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "crds", "testdata", "seeds", file))
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &obj))
	return obj
}

// template returns the content of the plan's template for action.
func template(t *testing.T, plan map[string]any, action string) string {
	t.Helper()
	for _, tmpl := range plan["spec"].(map[string]any)["templates"].([]any) {
		m := tmpl.(map[string]any)
		if m["action"] == action {
			return m["content"].(string)
		}
	}
	t.Fatalf("the plan has no %s template", action)
	return ""
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), got)
}

func postgresValues(t *testing.T) plan.Values {
	instance := seed(t, "003-sfserviceinstance.yaml")
	instance["metadata"].(map[string]any)["namespace"] = "tenant-a"
	return plan.Values{
		"service":  seed(t, "003-sfservice.yaml"),
		"plan":     seed(t, "003-sfplan-postgresql.yaml"),
		"instance": instance,
	}
}

// TestSeedPostgresqlPlanGolden renders the seed's postgresql plan and
// compares it with what its templates say, byte for byte.
func TestSeedPostgresqlPlanGolden(t *testing.T) {
	values := postgresValues(t)
	sfplan := values["plan"].(map[string]any)

	t.Run("provision", func(t *testing.T) {
		out, err := plan.Go("provision", template(t, sfplan, "provision"), values, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		golden(t, "postgresql-provision.yaml", out)

		objs, err := plan.Objects(out)
		require.NoError(t, err)
		require.Len(t, objs, 1)
		assert.Equal(t, "acid.zalan.do/v1", objs[0].GetAPIVersion())
		assert.Equal(t, "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f", objs[0].GetName())
	})

	t.Run("sources without a binding", func(t *testing.T) {
		out, err := plan.Go("sources", template(t, sfplan, "sources"), values, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		golden(t, "postgresql-sources.yaml", out)
		list, err := plan.Sources(out)
		require.NoError(t, err)
		assert.Equal(t, map[string]plan.Source{"postgresql": {
			APIVersion: "acid.zalan.do/v1", Kind: "postgresql",
			Name: "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f", Namespace: "tenant-a",
		}}, list.Sources)
		assert.Empty(t, list.Warnings(false))
	})

	t.Run("sources with a binding", func(t *testing.T) {
		bound := plan.Values{"binding": seed(t, "003-sfservicebinding.yaml")}
		for k, v := range values {
			bound[k] = v
		}
		out, err := plan.Go("sources", template(t, sfplan, "sources"), bound, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		list, err := plan.Sources(out)
		require.NoError(t, err)
		src := list.Sources
		assert.Empty(t, list.Warnings(true))
		assert.Equal(t, "de3dd272-fcfc-11e8-a31b-b6001f10c97f.sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f.credentials.postgresql.acid.zalan.do", src["secret"].Name)
		assert.Equal(t, "Service", src["svc"].Kind)
	})
}

// TestSeedPostgresqlStatus evaluates the seed's status template against
// source objects shaped as the API server returns them.
func TestSeedPostgresqlStatus(t *testing.T) {
	values := postgresValues(t)
	sfplan := values["plan"].(map[string]any)
	values["binding"] = seed(t, "003-sfservicebinding.yaml")
	values["svc"] = map[string]any{"spec": map[string]any{
		"clusterIP": "10.0.0.7",
		"ports":     []any{map[string]any{"port": int64(5432)}},
	}}
	values["secret"] = map[string]any{"data": map[string]any{
		"username": "dXNlcg==", // user
		"password": "czNjcjN0", // s3cr3t
	}}

	t.Run("running", func(t *testing.T) {
		values["postgresql"] = map[string]any{"status": map[string]any{"PostgresClusterStatus": "Running"}}
		out, err := plan.Go("status", template(t, sfplan, "status"), values, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		st := statuses(t, out)

		assert.Equal(t, "succeeded", st["provision"].State)
		assert.Equal(t, "succeeded", st["bind"].State)
		response, err := plan.DecodeBindResponse(st["bind"].Response)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{
			"dbname": "main", "hostname": "10.0.0.7", "port": "5432",
			"username": "user", "password": "s3cr3t",
			"uri": "postgres://user:s3cr3t@10.0.0.7:5432/main?sslmode=require",
		}, response.Credentials)
		assert.Equal(t, "succeeded", st["unbind"].State)
		assert.Equal(t, "in progress", st["deprovision"].State, "the postgresql object still exists")
	})

	t.Run("create failed", func(t *testing.T) {
		values["postgresql"] = map[string]any{"status": map[string]any{"PostgresClusterStatus": "CreateFailed"}}
		out, err := plan.Go("status", template(t, sfplan, "status"), values, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		assert.Equal(t, "failed", statuses(t, out)["provision"].State)
	})

	t.Run("deprovisioned", func(t *testing.T) {
		delete(values, "postgresql")
		delete(values, "svc")
		out, err := plan.Go("status", template(t, sfplan, "status"), values, plan.FuncMap(), plan.Bounds{})
		require.NoError(t, err)
		st := statuses(t, out)
		assert.Equal(t, "in progress", st["provision"].State)
		assert.Equal(t, "in progress", st["bind"].State, "no host yet")
		assert.Empty(t, st["bind"].Response)
		assert.Equal(t, "succeeded", st["deprovision"].State)
	})
}

// statuses reads each operation's section of a status template's output.
func statuses(t *testing.T, out string) map[string]plan.Status {
	t.Helper()
	st := map[string]plan.Status{}
	for _, op := range []string{"provision", "bind", "unbind", "deprovision"} {
		s, err := plan.StatusOf(out, op)
		require.NoError(t, err, op)
		require.NotNil(t, s, op)
		st[op] = *s
	}
	return st
}

// TestSeedPostgresqlBind renders the bind and unbind templates, which edit
// the postgresql source object.
func TestSeedPostgresqlBind(t *testing.T) {
	values := postgresValues(t)
	sfplan := values["plan"].(map[string]any)
	values["binding"] = seed(t, "003-sfservicebinding.yaml")
	postgresql := func() map[string]any {
		return map[string]any{
			"apiVersion": "acid.zalan.do/v1", "kind": "postgresql",
			"metadata": map[string]any{"name": "sapcp-0304b210-fcfd-11e8-a31b-b6001f10c97f"},
			"spec":     map[string]any{"users": map[string]any{"main": []any{"superuser", "createdb"}}},
		}
	}

	values["postgresql"] = postgresql()
	out, err := plan.Go("bind", template(t, sfplan, "bind"), values, plan.FuncMap(), plan.Bounds{})
	require.NoError(t, err)
	golden(t, "postgresql-bind.yaml", out)
	objs, err := plan.Objects(out)
	require.NoError(t, err)
	require.Len(t, objs, 1)
	users := objs[0].Object["spec"].(map[string]any)["users"].(map[string]any)
	assert.Equal(t, []any{"superuser"}, users["de3dd272-fcfc-11e8-a31b-b6001f10c97f"])

	values["postgresql"] = postgresql()
	values["postgresql"].(map[string]any)["spec"].(map[string]any)["users"].(map[string]any)["de3dd272-fcfc-11e8-a31b-b6001f10c97f"] = []any{"superuser"}
	out, err = plan.Go("unbind", template(t, sfplan, "unbind"), values, plan.FuncMap(), plan.Bounds{})
	require.NoError(t, err)
	objs, err = plan.Objects(out)
	require.NoError(t, err)
	users = objs[0].Object["spec"].(map[string]any)["users"].(map[string]any)
	assert.NotContains(t, users, "de3dd272-fcfc-11e8-a31b-b6001f10c97f")
	assert.Contains(t, users, "main")
}

// TestSeedClusterSelector evaluates the seed's clusterSelector template.
func TestSeedClusterSelector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "crds", "testdata", "seeds", "003-sfplan-fragments.yaml"))
	require.NoError(t, err)
	objs, err := plan.Objects(string(raw))
	require.NoError(t, err)
	sfplan := objs[2].Object
	content := template(t, sfplan, "clusterSelector")

	values := plan.Values{"instance": map[string]any{"spec": map[string]any{"planId": "plan-1"}}}
	out, err := plan.Go("clusterSelector", content, values, plan.FuncMap(), plan.Bounds{})
	require.NoError(t, err)
	sel, err := labels.Parse(strings.TrimSpace(out))
	require.NoError(t, err, "the template renders a label selector")
	assert.Equal(t, "plan=plan-1", sel.String())
	assert.True(t, sel.Matches(labels.Set{"plan": "plan-1", "region": "eu"}))
	assert.False(t, sel.Matches(labels.Set{"plan": "plan-2"}))
}

// TestClusterVariable: .cluster is the SFCluster the instance is scheduled
// on, with its name, labels and spec (not its status); the cluster
// Quartermaster runs in is its name alone.
func TestClusterVariable(t *testing.T) {
	scheme := crds.NewScheme()
	const tmpl = `{{ .cluster.metadata.name }} region={{ .cluster.metadata.labels.region | default "none" }} limit={{ .cluster.spec.schedulingLimitPercentage | default "none" }} status={{ .cluster.status | default "none" }}`
	eu2 := &resourcev1alpha1.SFCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "eu-2", Namespace: "brokers", Labels: map[string]string{"region": "eu", "plan": "gold"}},
		Spec:       resourcev1alpha1.SFClusterSpec{SecretRef: "eu-2-kubeconfig", SchedulingLimitPercentage: ptr.To[int32](80)},
		Status:     resourcev1alpha1.SFClusterStatus{KubernetesVersion: "v1.37.1"},
	}
	for _, tc := range []struct {
		name    string
		cluster *resourcev1alpha1.SFCluster
		want    string
	}{
		{"a registered cluster", eu2, "eu-2 region=eu limit=80 status=none"},
		{"the cluster Quartermaster runs in", &resourcev1alpha1.SFCluster{ObjectMeta: metav1.ObjectMeta{Name: "1"}}, "1 region=none limit=none status=none"},
		{"none given", nil, "1 region=none limit=none status=none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &plan.Subject{Service: &osbv1alpha1.SFService{}, Plan: &osbv1alpha1.SFPlan{}, Registry: registry.New(registry.Instance, nil), Cluster: tc.cluster}
			values, err := s.Values(scheme)
			require.NoError(t, err)
			out, err := plan.Go("cluster", tmpl, values, plan.FuncMap(), plan.Bounds{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, out)
		})
	}
}
