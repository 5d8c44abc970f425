package plan

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Release names the instance or binding a chart is rendered for. Nothing is
// installed: Helm's engine only renders, and the objects are applied like
// those of any other template.
type Release struct {
	Name      string
	Namespace string
	// Upgrade is set when an instance is updated.
	Upgrade bool
}

// LoadChart reads a chart archive (.tgz).
func LoadChart(archive []byte) (*chart.Chart, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("loading the helm chart: %w", err)
	}
	return ch, nil
}

// Helm renders a chart. Its values are the chart's defaults, overridden by
// values (the plan context merged with the request parameters), with the
// template variables (.service, .plan, .instance, ...) beside them under
// .Values. The objects come back in the order of their template files.
//
// Helm's engine takes no functions of ours, so a chart is bounded in time
// and in output (bounds), not call by call as a gotemplate is.
func Helm(ch *chart.Chart, rel Release, values map[string]any, vars Values, bounds Bounds) ([]*unstructured.Unstructured, error) {
	files, err := helmFiles(ch, rel, values, vars, bounds)
	if err != nil {
		return nil, err
	}
	return objectsOf(ch.Name(), files)
}

// helmFiles renders a chart's files in order, within bounds.
func helmFiles(ch *chart.Chart, rel Release, values map[string]any, vars Values, bounds Bounds) ([]File, error) {
	b := newBudget(bounds)
	return within(b, func() ([]File, error) {
		files, names, err := chartFiles(ch, rel, values, vars, b)
		if err != nil {
			return nil, err
		}
		out := make([]File, len(names))
		for i, n := range names {
			out[i] = File{Name: n, Text: files[n]}
		}
		return out, nil
	})
}

// HelmFile renders a chart whose output is read as text, not applied: the
// file whose base name is name (status.yaml), or the chart's only file.
// The inter-operator takes such a file, or any one when there is none; a
// chart with several files and none of that name is an error here, since
// which file "any one" is would change from render to render.
func HelmFile(ch *chart.Chart, rel Release, values map[string]any, vars Values, bounds Bounds, name string) (string, error) {
	b := newBudget(bounds)
	return within(b, func() (string, error) {
		files, names, err := chartFiles(ch, rel, values, vars, b)
		if err != nil {
			return "", err
		}
		for _, n := range names {
			if path.Base(n) == name {
				return files[n], nil
			}
		}
		if len(names) == 1 {
			return files[names[0]], nil
		}
		return "", fmt.Errorf("helm chart %s renders %d files and none is named %s", ch.Name(), len(names), name)
	})
}

// chartFiles renders a chart: its files by name, and their names in order,
// less partials (_helpers.tpl) and NOTES.txt.
func chartFiles(ch *chart.Chart, rel Release, values map[string]any, vars Values, b *budget) (map[string]string, []string, error) {
	merged := make(map[string]any, len(values)+len(vars))
	for k, v := range values {
		merged[k] = v
	}
	for k, v := range vars {
		merged[k] = v
	}
	top, err := chartutil.ToRenderValues(ch, merged, chartutil.ReleaseOptions{
		Name:      rel.Name,
		Namespace: rel.Namespace,
		Revision:  1,
		IsInstall: !rel.Upgrade,
		IsUpgrade: rel.Upgrade,
	}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("helm chart %s values: %w", ch.Name(), err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering helm chart %s: %w", ch.Name(), err)
	}

	names := make([]string, 0, len(files))
	for name := range files {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || strings.EqualFold(base, "NOTES.txt") {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, err := b.Write([]byte(files[name])); err != nil {
			return nil, nil, fmt.Errorf("helm chart %s: %w", ch.Name(), err)
		}
	}
	return files, names, nil
}
