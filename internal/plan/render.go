package plan

import (
	"encoding/base64"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// TemplateError is a template that cannot be read or rendered, or whose
// output is not what its action needs. Rendering it again fails again.
type TemplateError struct {
	err error
}

func (e *TemplateError) Error() string { return e.err.Error() }
func (e *TemplateError) Unwrap() error { return e.err }

// renderError is the error of a render: the template's (a TemplateError,
// which rendering again meets again), unless the render could not run at
// all (ErrRenderUnavailable), which a later try may not meet.
func renderError(action osbv1alpha1.TemplateAction, err error) error {
	if errors.Is(err, ErrRenderUnavailable) {
		return fmt.Errorf("%s template: %w", action, err)
	}
	return templateError(action, err)
}

// templateError names the action in front of err.
func templateError(action osbv1alpha1.TemplateAction, err error) error {
	return &TemplateError{err: fmt.Errorf("%s template: %w", action, err)}
}

// Objects renders the template for action (provision, bind or unbind) into
// the objects to apply; a plan without one renders nothing. A chart that
// cannot be fetched is a plain error: a later fetch may work.
func (s *Subject) Objects(action osbv1alpha1.TemplateAction, values Values) ([]*unstructured.Unstructured, error) {
	tmpl := s.Template(action)
	if tmpl == nil {
		return nil, nil
	}
	if tmpl.Type == osbv1alpha1.TemplateHelm {
		return s.helmObjects(tmpl, values)
	}
	out, err := s.Text(action, values)
	if err != nil {
		return nil, err
	}
	objs, err := Objects(out)
	if err != nil {
		return nil, templateError(action, err)
	}
	return objs, nil
}

// Text renders the template for action to text: a gotemplate's output, or
// the file of a helm chart that the action names (helmText).
func (s *Subject) Text(action osbv1alpha1.TemplateAction, values Values) (string, error) {
	tmpl := s.Template(action)
	if tmpl == nil {
		return "", templateError(action, errors.New("the plan has none"))
	}
	if tmpl.Type == osbv1alpha1.TemplateHelm {
		return s.helmText(tmpl, values)
	}
	content, err := s.gotemplateBody(tmpl)
	if err != nil {
		return "", err
	}
	res, err := s.run(Job{Name: string(action), Content: content, Values: values})
	if err != nil {
		return "", renderError(action, err)
	}
	return res.Text, nil
}

// Sources renders the sources template: the objects the status, bind and
// unbind templates see, and what was left out of them (SourceList). A plan
// without one has no sources.
func (s *Subject) Sources(values Values) (SourceList, error) {
	if s.Template(osbv1alpha1.ActionSources) == nil {
		return SourceList{}, nil
	}
	out, err := s.Text(osbv1alpha1.ActionSources, values)
	if err != nil {
		return SourceList{}, err
	}
	list, err := Sources(out)
	if err != nil {
		return SourceList{}, &TemplateError{err: err}
	}
	return list, nil
}

// HasStatus reports whether the plan has a status template.
func (s *Subject) HasStatus() bool { return s.Template(osbv1alpha1.ActionStatus) != nil }

// Status renders the status template and returns what it says of op (an
// update falls back to provision), or nil when it says nothing of it. Only
// op's section is read (StatusOf); a state other than succeeded, failed or
// in progress there is a *TemplateError.
func (s *Subject) Status(op string, values Values) (*Status, error) {
	out, err := s.Text(osbv1alpha1.ActionStatus, values)
	if err != nil {
		return nil, err
	}
	st, err := StatusOf(out, op)
	if err != nil {
		return nil, templateError(osbv1alpha1.ActionStatus, err)
	}
	if st == nil {
		return nil, nil
	}
	switch osbv1alpha1.OperationState(st.State) {
	case osbv1alpha1.StateSucceeded, osbv1alpha1.StateFailed, osbv1alpha1.StateInProgress:
		return st, nil
	default:
		return nil, templateError(osbv1alpha1.ActionStatus,
			fmt.Errorf("%s.state is %q; want succeeded, failed or in progress", op, st.State))
	}
}

// helmObjects renders a chart template.
func (s *Subject) helmObjects(tmpl *osbv1alpha1.TemplateSpec, values Values) ([]*unstructured.Unstructured, error) {
	archive, err := s.chartArchive(tmpl)
	if err != nil {
		return nil, err
	}
	chartValues, err := s.chartValues()
	if err != nil {
		return nil, templateError(tmpl.Action, err)
	}
	res, err := s.run(Job{Chart: archive, Release: s.release(), ChartValues: chartValues, Values: values})
	if err != nil {
		return nil, renderError(tmpl.Action, err)
	}
	objs, err := objectsOf(res.Chart, res.Files)
	if err != nil {
		return nil, templateError(tmpl.Action, err)
	}
	return objs, nil
}

// helmText renders a chart template whose output is read as text
// (sources, status, clusterSelector): the file named after the action
// (templates/status.yaml), or the chart's one file.
func (s *Subject) helmText(tmpl *osbv1alpha1.TemplateSpec, values Values) (string, error) {
	archive, err := s.chartArchive(tmpl)
	if err != nil {
		return "", err
	}
	chartValues, err := s.chartValues()
	if err != nil {
		return "", templateError(tmpl.Action, err)
	}
	res, err := s.run(Job{Chart: archive, Release: s.release(), ChartValues: chartValues, Values: values, File: string(tmpl.Action) + ".yaml"})
	if err != nil {
		return "", renderError(tmpl.Action, err)
	}
	return res.Text, nil
}

// gotemplateBody is the text of a gotemplate: content, contentEncoded
// decoded, or fetched from url.
func (s *Subject) gotemplateBody(tmpl *osbv1alpha1.TemplateSpec) (string, error) {
	if tmpl.URL != "" && tmpl.Content == "" && tmpl.ContentEncoded == "" {
		raw, err := s.fetcher().Fetch(s.Plan, tmpl)
		return string(raw), err
	}
	return inlineBody(tmpl)
}

// inlineBody is the text of a gotemplate given in the plan: content, or
// contentEncoded decoded.
func inlineBody(tmpl *osbv1alpha1.TemplateSpec) (string, error) {
	switch {
	case tmpl.Content != "":
		return tmpl.Content, nil
	case tmpl.ContentEncoded != "":
		raw, err := base64.StdEncoding.DecodeString(tmpl.ContentEncoded)
		if err != nil {
			return "", templateError(tmpl.Action, fmt.Errorf("contentEncoded is not base64: %w", err))
		}
		return string(raw), nil
	default:
		return "", nil
	}
}

// chartArchive is a helm template's chart archive: contentEncoded decoded,
// or fetched from url.
func (s *Subject) chartArchive(tmpl *osbv1alpha1.TemplateSpec) ([]byte, error) {
	switch {
	case tmpl.ContentEncoded != "":
		return inlineArchive(tmpl)
	case tmpl.URL != "":
		return s.fetcher().Fetch(s.Plan, tmpl)
	default:
		return nil, templateError(tmpl.Action, errors.New("a helm template needs url or contentEncoded"))
	}
}

// inlineArchive is a chart archive given in the plan, base64-encoded.
func inlineArchive(tmpl *osbv1alpha1.TemplateSpec) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(tmpl.ContentEncoded)
	if err != nil {
		return nil, templateError(tmpl.Action, fmt.Errorf("contentEncoded is not base64: %w", err))
	}
	return raw, nil
}

func (s *Subject) fetcher() *Fetcher {
	if s.Fetcher != nil {
		return s.Fetcher
	}
	return defaultFetcher
}
