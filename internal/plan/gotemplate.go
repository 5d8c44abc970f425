package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Go renders a gotemplate template within bounds (zero bounds are
// DefaultBounds). name appears in error messages, which carry the
// template's line: "template: provision:12:5: ...".
func Go(name, content string, values Values, funcs template.FuncMap, bounds Bounds) (string, error) {
	b := newBudget(bounds)
	tmpl, err := template.New(name).Funcs(b.guard(funcs)).Parse(content)
	if err != nil {
		return "", err
	}
	return within(b, func() (string, error) {
		out := &boundedBuffer{budget: b}
		if err := tmpl.Execute(out, map[string]any(values)); err != nil {
			return "", err
		}
		return out.String(), nil
	})
}

// boundedBuffer keeps a render's output within its budget.
type boundedBuffer struct {
	bytes.Buffer
	budget *budget
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if _, err := w.budget.Write(p); err != nil {
		return 0, err
	}
	return w.Buffer.Write(p)
}

// Objects decodes rendered YAML into Kubernetes objects, one per document,
// with a YAML decoder (a `---` inside a block scalar is content, not a
// separator). Empty documents are skipped; a document that is not an object
// with apiVersion, kind and metadata.name is an error naming the document.
func Objects(rendered string) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewDecoder(strings.NewReader(rendered))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("rendered document %d is not YAML: %w", i, err)
		}
		if doc == nil {
			continue
		}
		obj, err := toObject(doc)
		if err != nil {
			return nil, fmt.Errorf("rendered document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

func toObject(doc any) (*unstructured.Unstructured, error) {
	m, err := jsonShaped(doc)
	if err != nil {
		return nil, err
	}
	obj, ok := m.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a Kubernetes object, got %T", m)
	}
	u := &unstructured.Unstructured{Object: obj}
	switch {
	case u.GetAPIVersion() == "":
		return nil, errors.New("object has no apiVersion")
	case u.GetKind() == "":
		return nil, errors.New("object has no kind")
	case u.GetName() == "":
		return nil, fmt.Errorf("%s has no metadata.name", u.GetKind())
	}
	return u, nil
}

// jsonShaped converts a decoded YAML value to the shapes unstructured
// objects hold: maps with string keys, int64 for integers, float64 otherwise.
func jsonShaped(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not representable as JSON (a map key that is not a string?): %w", err)
	}
	var out any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}
