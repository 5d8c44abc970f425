package testenv

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ChartKubeVersion is the embedded cluster's version, as Helm renders for
// it; its API versions include the MutatingAdmissionPolicy of the
// finalizer policies.
var ChartKubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}

// QMChart loads Quartermaster's Helm chart, deploy/chart/quartermaster.
func QMChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(RepoDir(), "deploy", "chart", "quartermaster"))
	require.NoError(t, err)
	return ch
}

// RenderChart is `helm template qm <chart> -n ns --include-crds` with
// vals, for the embedded cluster and the Prometheus Operator's kinds; its
// objects are keyed by "Kind/name". Hooks are left out (RenderChartHooks).
func RenderChart(t testing.TB, ch *chart.Chart, ns string, vals map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	return decodeManifests(t, renderRelease(t, ch, ns, vals).Manifest)
}

// RenderChartHooks is what RenderChart leaves out: the chart's hooks, keyed
// by "Kind/name".
func RenderChartHooks(t testing.TB, ch *chart.Chart, ns string, vals map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	var manifests []string
	for _, h := range renderRelease(t, ch, ns, vals).Hooks {
		manifests = append(manifests, "---\n"+h.Manifest)
	}
	return decodeManifests(t, strings.Join(manifests, "\n"))
}

func renderRelease(t testing.TB, ch *chart.Chart, ns string, vals map[string]any) *release.Release {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.IncludeCRDs = true, true, true
	install.ReleaseName, install.Namespace = "qm", ns
	install.KubeVersion = ChartKubeVersion
	install.APIVersions = chartutil.VersionSet{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "monitoring.coreos.com/v1/ServiceMonitor",
		"monitoring.coreos.com/v1/PrometheusRule"}
	rel, err := install.Run(ch, vals)
	require.NoError(t, err, "helm template")
	return rel
}

// decodeManifests decodes a stream of YAML documents, keyed by "Kind/name".
func decodeManifests(t testing.TB, manifest string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if len(obj.Object) == 0 {
			continue
		}
		key := obj.GetKind() + "/" + obj.GetName()
		require.NotContains(t, objs, key, "rendered twice")
		objs[key] = obj
	}
	return objs
}

// ChartArchive packs a small chart as `helm package` would: a ConfigMap
// <release>-tenant with the size, plan and instance it was rendered for, a
// ResourceQuota, and a ConfigMap "upgraded" only on an upgrade.
func ChartArchive(t testing.TB) []byte {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "tenant", Version: "0.1.0"},
		Raw:      []*chart.File{{Name: "values.yaml", Data: []byte("size: small\nquota:\n  pods: 4\n")}},
		Templates: []*chart.File{
			{Name: "templates/_helpers.tpl", Data: []byte(`{{ define "tenant.name" }}{{ .Release.Name }}-tenant{{ end }}`)},
			{Name: "templates/configmap.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "tenant.name" . }}
  namespace: {{ .Release.Namespace }}
data:
  size: {{ .Values.size | quote }}
  plan: {{ .Values.plan.spec.name | quote }}
  instance: {{ .Values.instance.metadata.name | quote }}
`)},
			{Name: "templates/quota.yaml", Data: []byte(`apiVersion: v1
kind: ResourceQuota
metadata:
  name: {{ include "tenant.name" . }}
spec:
  hard:
    pods: {{ .Values.quota.pods | quote }}
---
{{- if .Release.IsUpgrade }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: upgraded
{{- end }}
`)},
			{Name: "templates/NOTES.txt", Data: []byte(`Not an object.`)},
		},
	}
	return saveChart(t, ch)
}

// ChartOf packs a chart named name whose templates are files (by their
// path in the chart, templates/status.yaml) into an archive (.tgz).
func ChartOf(t testing.TB, name string, files map[string]string) []byte {
	t.Helper()
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: name, Version: "0.1.0"}}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		ch.Templates = append(ch.Templates, &chart.File{Name: path, Data: []byte(files[path])})
	}
	return saveChart(t, ch)
}

func saveChart(t testing.TB, ch *chart.Chart) []byte {
	t.Helper()
	path, err := chartutil.Save(ch, t.TempDir())
	require.NoError(t, err)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return raw
}
