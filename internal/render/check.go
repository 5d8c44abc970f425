package render

import (
	"encoding/base64"
	"fmt"
	"maps"
	"text/template"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Check reports the first problem of a plan's templates that can be found
// without rendering them: a template that does not parse (with its line), a
// helm chart archive that does not load, or two templates for one action.
// extra are functions a render would also have (the registry's).
func Check(plan *osbv1alpha1.SFPlan, extra template.FuncMap) error {
	funcs := FuncMap()
	maps.Copy(funcs, extra)
	seen := map[osbv1alpha1.TemplateAction]bool{}
	for _, t := range plan.Spec.Templates {
		if seen[t.Action] {
			return fmt.Errorf("two templates for action %s", t.Action)
		}
		seen[t.Action] = true
		content := t.Content
		if t.ContentEncoded != "" {
			raw, err := base64.StdEncoding.DecodeString(t.ContentEncoded)
			if err != nil {
				return fmt.Errorf("%s template: contentEncoded is not base64: %w", t.Action, err)
			}
			content = string(raw)
		}
		switch {
		case t.Type == osbv1alpha1.TemplateHelm && t.ContentEncoded != "":
			if _, err := LoadChart([]byte(content)); err != nil {
				return fmt.Errorf("%s template: %w", t.Action, err)
			}
		case t.Type == osbv1alpha1.TemplateGo && t.URL != "":
			return fmt.Errorf("%s template: gotemplate templates fetched from a url are not supported; give content", t.Action)
		case t.Type == osbv1alpha1.TemplateGo:
			if _, err := template.New(string(t.Action)).Funcs(funcs).Parse(content); err != nil {
				return fmt.Errorf("%s template: %w", t.Action, err)
			}
		}
	}
	return nil
}
