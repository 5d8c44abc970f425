package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/discovery"

	"github.com/quartermaster/qm/internal/testenv"
)

// permission is a verb on a resource (or "resource/subresource") of an API
// group, as RBAC grants it and the audit log records its use.
type permission struct{ group, resource, verb string }

// grant is a permission a component's roles give, and the role and rule
// that give it.
type grant struct {
	permission
	// source is the role, or the chart value the rule comes from.
	source string
}

// refusal is a request the API server refused a component.
type refusal struct {
	permission
	uri string
}

// access is what the audit log says of one release's service accounts:
// per component (the service account's name less the release's prefix),
// the permissions it used and the requests refused it.
type access struct {
	used    map[string]map[permission]bool
	refused map[string][]refusal
}

func (p permission) String() string {
	group := p.group
	if group == "" {
		group = "core"
	}
	return group + " " + p.resource + " " + p.verb
}

// readAudit reads the audit log of the test cluster (testenv's Cluster.AuditLog)
// for the service accounts of ns named <fullname>-<component>.
func readAudit(t *testing.T, path, ns, fullname string) access {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err, "the API server's audit log")
	defer f.Close()
	a := access{used: map[string]map[permission]bool{}, refused: map[string][]refusal{}}
	prefix := "system:serviceaccount:" + ns + ":" + fullname + "-"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue // a line being written
		}
		component, ok := strings.CutPrefix(ev.User.Username, prefix)
		if !ok || ev.ObjectRef == nil {
			continue // another account, or discovery
		}
		p := permission{group: ev.ObjectRef.APIGroup, resource: ev.ObjectRef.Resource, verb: ev.Verb}
		if ev.ObjectRef.Subresource != "" {
			p.resource += "/" + ev.ObjectRef.Subresource
		}
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 {
			a.refused[component] = append(a.refused[component], refusal{permission: p, uri: ev.RequestURI})
			continue
		}
		if a.used[component] == nil {
			a.used[component] = map[permission]bool{}
		}
		a.used[component][p] = true
	}
	require.NoError(t, sc.Err())
	return a
}

// grants expands the rules of the roles that the release's bindings give
// the service account <fullname>-<component> into single permissions; a
// rule equal to one of valueRules[name] is attributed to that chart value.
// A resource "*" stands for every resource (and subresource) served in
// the rule's groups (servedResources).
func grants(t *testing.T, served map[string][]string, objs map[string]*unstructured.Unstructured, fullname, component string,
	valueRules map[string][]rbacv1.PolicyRule) []grant {
	t.Helper()
	var out []grant
	for _, obj := range objs {
		if obj.GetKind() != "RoleBinding" && obj.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var binding rbacv1.RoleBinding
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &binding))
		if !slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool { return s.Name == fullname+"-"+component }) {
			continue
		}
		role := objs[binding.RoleRef.Kind+"/"+binding.RoleRef.Name]
		require.NotNil(t, role, "%s binds %s, which the chart renders", obj.GetName(), binding.RoleRef.Name)
		var rules struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &rules))
		for _, rule := range rules.Rules {
			source := role.GetKind() + " " + role.GetName()
			for name, vrules := range valueRules {
				if slices.ContainsFunc(vrules, func(v rbacv1.PolicyRule) bool { return reflect.DeepEqual(v, rule) }) {
					source = "value " + name
				}
			}
			for _, group := range rule.APIGroups {
				resources := rule.Resources
				if slices.Contains(resources, "*") {
					resources = served[group]
				}
				for _, resource := range resources {
					for _, verb := range rule.Verbs {
						out = append(out, grant{permission: permission{group: group, resource: resource, verb: verb}, source: source})
					}
				}
			}
		}
	}
	return out
}

// servedResources lists the resources and subresources of each API group.
func servedResources(t *testing.T, kube *testenv.Cluster) map[string][]string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(kube.Config)
	require.NoError(t, err)
	_, lists, err := dc.ServerGroupsAndResources()
	require.NoError(t, err)
	served := map[string]map[string]bool{}
	for _, list := range lists {
		group, _, _ := strings.Cut(list.GroupVersion, "/")
		if !strings.Contains(list.GroupVersion, "/") {
			group = ""
		}
		if served[group] == nil {
			served[group] = map[string]bool{}
		}
		for _, r := range list.APIResources {
			served[group][r.Name] = true
		}
	}
	out := map[string][]string{}
	for group, names := range served {
		out[group] = slices.Sorted(maps.Keys(names))
	}
	return out
}

// accessTable writes, per component and resource, the verbs its roles
// grant that it used and those it never used, and where they come from.
func accessTable(granted map[string][]grant, used map[string]map[permission]bool) string {
	type key struct{ component, group, resource, source string }
	rows := map[key][2][]string{}
	for component, grants := range granted {
		for _, g := range grants {
			k := key{component, g.group, g.resource, g.source}
			row := rows[k]
			if used[component][g.permission] {
				row[0] = append(row[0], g.verb)
			} else {
				row[1] = append(row[1], g.verb)
			}
			rows[k] = row
		}
	}
	var b strings.Builder
	b.WriteString("| component | resource | used | granted, never used | from |\n|---|---|---|---|---|\n")
	for _, k := range slices.SortedFunc(maps.Keys(rows), func(a, b key) int {
		return strings.Compare(a.component+" "+a.group+" "+a.resource+" "+a.source, b.component+" "+b.group+" "+b.resource+" "+b.source)
	}) {
		group := k.group
		if group == "" {
			group = "core"
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s |\n", k.component, group, k.resource,
			strings.Join(rows[k][0], ", "), strings.Join(rows[k][1], ", "), k.source)
	}
	return b.String()
}

// reportRefusals fails the test on each request the API server refused a
// component of the release, and on each refusal in a pod's log. It runs as the test's cleanup, so that a
// refusal is named even when what it broke stopped the test first.
func reportRefusals(t *testing.T, kube *testenv.Cluster, r podsRelease, k *kubelet) {
	t.Helper()
	t.Cleanup(func() {
		for component, refused := range readAudit(t, kube.AuditLog, r.ns, r.fullname).refused {
			times := map[refusal]int{}
			for _, ref := range refused {
				times[ref]++
			}
			for ref, n := range times {
				t.Errorf("the API server refused the %s %s (%s), %d times", component, ref.permission, ref.uri, n)
			}
		}
		for _, p := range k.pods {
			for line := range strings.Lines(p.log.String()) {
				if strings.Contains(strings.ToLower(line), "forbidden") {
					t.Errorf("a refusal in the log of %s: %s", p.name, line)
				}
			}
		}
	})
}

// checkAccess fails the test on any permission granted to a component and
// never used that whyKept does not explain.
func checkAccess(t *testing.T, kube *testenv.Cluster, r podsRelease) {
	t.Helper()
	a := readAudit(t, kube.AuditLog, r.ns, r.fullname)
	// The rules that come from the user's values, as the chart merges them:
	// the worker's plan and usage rules, the workloads UsageKinds name.
	merged, err := chartutil.CoalesceValues(testenv.QMChart(t), r.values)
	require.NoError(t, err)
	workerRBAC, err := merged.Table("worker.rbac")
	require.NoError(t, err)
	valueRules := map[string][]rbacv1.PolicyRule{}
	for _, name := range []string{"planRules", "usageRules"} {
		var rules struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"rules": workerRBAC[name]}, &rules))
		valueRules["worker.rbac."+name] = rules.Rules
	}
	usageKinds, err := merged.Table("watcher")
	require.NoError(t, err)
	for _, u := range usageKinds["usageKindResources"].([]any) {
		res := u.(map[string]any)
		for _, verbs := range [][]string{{"list", "watch"}, {"list"}} {
			valueRules["watcher.usageKindResources"] = append(valueRules["watcher.usageKindResources"],
				rbacv1.PolicyRule{APIGroups: []string{res["group"].(string)}, Resources: []string{res["resource"].(string)}, Verbs: verbs})
		}
	}

	served := servedResources(t, kube)
	granted := map[string][]grant{}
	for _, component := range []string{"api", "watcher", "worker"} {
		assert.NotEmpty(t, a.used[component], "the audit log has the %s's requests", component)
		for _, g := range grants(t, served, r.objs, r.fullname, component, valueRules) {
			if slices.Contains(granted[component], g) {
				continue
			}
			granted[component] = append(granted[component], g)
			if _, ok := whyKept(component, g, a.used[component]); !ok {
				t.Errorf("the %s's roles grant %s (%s), which it never used: trim it, or say in keptUnused why it stays", component, g.permission, g.source)
			}
		}
	}
	for key := range keptUnused {
		component, perm, _ := strings.Cut(key, " ")
		assert.True(t, slices.ContainsFunc(granted[component], func(g grant) bool { return g.permission.String() == perm }),
			"keptUnused names %q, which the %s's roles no longer grant", perm, component)
	}
	t.Logf("permissions granted, used and never used:\n%s", accessTable(granted, a.used))
}

// keptUnused are permissions the chart grants that TestChartPods does not
// use, by "component group resource verb", with the path that needs them.
// serviceClassWrites is why the watcher may write RegisteredServices and
// Secrets: a ServiceClass's services and their secret values. The pods
// test makes no ServiceClass yet; TestServiceClassRegistersItsResources
// drives them on the processes.
const serviceClassWrites = "a ServiceClass's RegisteredServices and the Secrets of their secret values"

// instanceQuotas is why the watcher may write ResourceQuotas: a namespace's
// instance limit (starter's TestInstanceLimits drives it).
const instanceQuotas = "the ResourceQuota of a namespace annotated with an instance limit"

var keptUnused = map[string]string{
	"watcher osb.servicefabrik.io sfserviceinstances patch":        "the finalizer, on clusters without the admission policies (before Kubernetes 1.36)",
	"watcher osb.servicefabrik.io sfservicebindings patch":         "the finalizer, on clusters without the admission policies (before Kubernetes 1.36)",
	"watcher osb.servicefabrik.io sfservicebindings delete":        `a binding whose status.state a client sets to "delete"`,
	"watcher osb.servicefabrik.io sfserviceinstances/status patch": "the Started condition of a run that cannot start (Temporal unreachable)",
	"watcher osb.servicefabrik.io sfservicebindings/status patch":  "the Started condition of a run that cannot start (Temporal unreachable)",
	"watcher primaza.io servicecatalogs update":                    "a ServiceCatalog whose services change",
	"watcher primaza.io servicecatalogs delete":                    "a ServiceCatalog of an environment no service or claim names any more",
	"watcher core events patch":                                    "the event recorder patches the count of a repeated event",
	"watcher primaza.io registeredservices create":                 serviceClassWrites,
	"watcher primaza.io registeredservices update":                 serviceClassWrites,
	"watcher primaza.io registeredservices delete":                 serviceClassWrites,
	"watcher primaza.io serviceclasses/status patch":               serviceClassWrites,
	"watcher core secrets create":                                  serviceClassWrites,
	"watcher core secrets update":                                  serviceClassWrites,
	"watcher core secrets delete":                                  serviceClassWrites,
	"worker primaza.io registeredservices get":                     "a service just given to a claim, read afresh when the worker's cache does not show the hold yet; a hold that met a conflict; a hold let go of for a claim already gone",
	"worker core events patch":                                     "the event recorder patches the count of a repeated event",
	"worker osb.servicefabrik.io sfservicebindings create":         "the successor bindings of a binding whose credentials rotate (TestCredentialsRotateOnSchedule drives them on the processes)",
	"watcher core resourcequotas create":                           instanceQuotas,
	"watcher core resourcequotas patch":                            instanceQuotas,
	"watcher core resourcequotas deletecollection":                 instanceQuotas,
	"worker core serviceaccounts impersonate":                      "a tenant's plan, applied as a ServiceAccount of its namespace (starter's TestTenantsAreKeptApart drives it with RBAC enforced)",
}

// whyKept says why a permission granted to a component is there: it used
// it; or it is an informer's list beside a watch it used; or it comes from
// the user's values; or keptUnused says why.
func whyKept(component string, g grant, used map[permission]bool) (string, bool) {
	switch {
	case used[g.permission]:
		return "used", true
	case g.verb == "list" && used[permission{group: g.group, resource: g.resource, verb: "watch"}]:
		return "an informer's list, streamed through its watch here", true
	case strings.HasPrefix(g.source, "value "):
		return "the user's " + strings.TrimPrefix(g.source, "value "), true
	}
	reason, ok := keptUnused[component+" "+g.permission.String()]
	return reason, ok
}
