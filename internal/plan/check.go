package plan

import (
	"fmt"
	"text/template"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/registry"
)

// Check reports the first problem of a plan's templates that can be found
// without rendering them: a template that does not parse (with its line), a
// helm chart archive that does not load, or two templates for one action.
// A template behind a url is not fetched.
func Check(plan *osbv1alpha1.SFPlan) error {
	funcs := Funcs(registry.New(registry.Instance, nil))
	seen := map[osbv1alpha1.TemplateAction]bool{}
	for i := range plan.Spec.Templates {
		t := &plan.Spec.Templates[i]
		if seen[t.Action] {
			return fmt.Errorf("two templates for action %s", t.Action)
		}
		seen[t.Action] = true
		switch {
		case t.Type == osbv1alpha1.TemplateHelm && t.ContentEncoded != "":
			archive, err := inlineArchive(t)
			if err != nil {
				return err
			}
			if _, err := LoadChart(archive); err != nil {
				return templateError(t.Action, err)
			}
		case t.Type == osbv1alpha1.TemplateGo && (t.Content != "" || t.ContentEncoded != ""):
			content, err := inlineBody(t)
			if err != nil {
				return err
			}
			if _, err := template.New(string(t.Action)).Funcs(funcs).Parse(content); err != nil {
				return templateError(t.Action, err)
			}
		}
	}
	return nil
}
