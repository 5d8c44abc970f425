package testenv

import (
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

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
