package render

import (
	"fmt"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/labels"
)

// ClusterSelector renders a clusterSelector template and parses its output
// as a label selector over SFClusters, e.g. "plan=small,region!=eu". An
// empty output selects every cluster.
func ClusterSelector(content string, values Values, funcs template.FuncMap) (labels.Selector, error) {
	out, err := Go("clusterSelector", content, values, funcs)
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("clusterSelector template rendered %q, which is not a label selector: %w", strings.TrimSpace(out), err)
	}
	return sel, nil
}
