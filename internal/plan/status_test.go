package plan_test

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/plan"
	"github.com/quartermaster/qm/internal/registry"
	"github.com/quartermaster/qm/internal/testenv"
)

// interOperatorSources is a sources template in the inter-operator's
// style: it lists the binding's object for every operation, with an empty
// name when there is no binding.
const interOperatorSources = `
{{- $instance := "" }}{{ with .instance.metadata.name }}{{ $instance = . }}{{ end }}
{{- $binding := "" }}{{ with .binding.metadata.name }}{{ $binding = . }}{{ end }}
docker:
  apiVersion: deployment.servicefabrik.io/v1alpha1
  kind: Docker
  name: {{ $instance }}
dockerbind:
  apiVersion: bind.servicefabrik.io/v1alpha1
  kind: DockerBind
  name: {{ $binding }}
`

// TestSourcesReadAsTheInterOperatorDoes: what a sources template's output
// yields, what is skipped, and what the plan's author is warned of.
func TestSourcesReadAsTheInterOperatorDoes(t *testing.T) {
	instance := map[string]any{"metadata": map[string]any{"name": "d-1"}}
	docker := plan.Source{APIVersion: "deployment.servicefabrik.io/v1alpha1", Kind: "Docker", Name: "d-1"}
	for _, tc := range []struct {
		name       string
		template   string
		values     plan.Values
		forBinding bool
		want       map[string]plan.Source
		warnings   []string
		err        string
	}{
		{name: "an instance's operation skips the binding's unnamed source, without a word",
			template: interOperatorSources, values: plan.Values{"instance": instance},
			want: map[string]plan.Source{"docker": docker}},
		{name: "a binding's operation reads both",
			template:   interOperatorSources,
			values:     plan.Values{"instance": instance, "binding": map[string]any{"metadata": map[string]any{"name": "b-1"}}},
			forBinding: true,
			want: map[string]plan.Source{"docker": docker, "dockerbind": {
				APIVersion: "bind.servicefabrik.io/v1alpha1", Kind: "DockerBind", Name: "b-1"}}},
		{name: "a binding's operation warns of a source left without a name",
			template:   interOperatorSources + "secret: {apiVersion: v1, kind: Secret, name: '{{ with .binding.metadata.nmae }}{{ . }}{{ end }}'}\n",
			values:     plan.Values{"instance": instance, "binding": map[string]any{"metadata": map[string]any{"name": "b-1"}}},
			forBinding: true,
			want: map[string]plan.Source{"docker": docker, "dockerbind": {
				APIVersion: "bind.servicefabrik.io/v1alpha1", Kind: "DockerBind", Name: "b-1"}},
			warnings: []string{`sources template: "secret" has no name, so the binding's templates never see it`}},
		{name: "a field no source has is ignored, with a warning",
			template: "docker: {apiVersion: deployment.servicefabrik.io/v1alpha1, kind: Docker, name: d-1, nmaespace: other}\n",
			want:     map[string]plan.Source{"docker": docker},
			warnings: []string{"sources template: docker.nmaespace is not a field of a source (apiVersion, kind, name, namespace), and is ignored"}},
		{name: "nothing at all is no sources", template: "{{/* no sources yet */}}", want: map[string]plan.Source{}},
		{name: "a named source without a kind cannot be read",
			template: "docker: {apiVersion: v1, name: d-1}\n",
			err:      `sources template output: "docker" names "d-1" but needs an apiVersion and a kind to be read`},
		{name: "a source that is not a map", template: "docker: d-1\n", err: "sources template output: error unmarshaling JSON"},
		{name: "a name that is not a string", template: "docker: {apiVersion: v1, kind: Docker, name: [a]}\n",
			err: "sources template output, docker: name must be a string, not array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := plan.Go("sources", tc.template, tc.values, plan.FuncMap(), plan.Bounds{})
			require.NoError(t, err)
			list, err := plan.Sources(out)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, list.Sources)
			assert.Equal(t, tc.warnings, list.Warnings(tc.forBinding))
		})
	}
}

// interOperatorStatus is a status template in the inter-operator's style:
// it renders every operation's section each time. While the instance
// provisions, the bind section's response is a message, not JSON, and the
// provision's response is free text.
const interOperatorStatus = `
{{- $state := "in progress" }}{{ $response := "" }}
{{- with .docker.status }}{{ if eq .state "succeeded" }}{{ $state = "succeeded" }}{{ end }}{{ end }}
{{- if eq $state "succeeded" }}{{ $response = "Service Instance creation successful" }}{{ end }}
provision:
  state: {{ $state }}
  response: {{ $response }}
  dashboardUrl: ""
bind:
  state: {{ with .dockerbind.status }}{{ .state }}{{ else }}in progress{{ end }}
  response: {{ with .dockerbind.status.response }}{{ b64dec . | squote }}{{ else }}{{ $response }}{{ end }}
deprovision:
  state: {{ if .docker }}in progress{{ else }}succeeded{{ end }}
`

// TestStatusReadsTheRunningOperationsSection: only the running operation's
// section of a status template's output is read; the others may be
// anything, as long as the whole is YAML.
func TestStatusReadsTheRunningOperationsSection(t *testing.T) {
	running := plan.Values{"docker": map[string]any{"status": map[string]any{"state": "succeeded"}}}
	creds := base64.StdEncoding.EncodeToString([]byte(`{"credentials": {"user": "u"}}`))
	bound := plan.Values{"docker": running["docker"], "dockerbind": map[string]any{"status": map[string]any{"state": "succeeded", "response": creds}}}
	for _, tc := range []struct {
		name     string
		template string
		values   plan.Values
		op       string
		want     *plan.Status
		err      string
	}{
		{name: "a provision reads its own section while the bind's response is not JSON",
			template: interOperatorStatus, values: running, op: "provision",
			want: &plan.Status{State: "succeeded", Response: "Service Instance creation successful"}},
		{name: "an update falls back to the provision's section",
			template: interOperatorStatus, values: running, op: "update",
			want: &plan.Status{State: "succeeded", Response: "Service Instance creation successful"}},
		{name: "an update's own section wins",
			template: "provision: {state: succeeded}\nupdate: {state: in progress, description: resizing}\n", op: "update",
			want: &plan.Status{State: "in progress", Description: "resizing"}},
		{name: "a bind reads its response as the template wrote it",
			template: interOperatorStatus, values: bound, op: "bind",
			want: &plan.Status{State: "succeeded", Response: `{"credentials": {"user": "u"}}`}},
		{name: "a deprovision ignores the other sections",
			template: interOperatorStatus, op: "deprovision", want: &plan.Status{State: "succeeded"}},
		{name: "another section that is not a map is not read",
			template: "provision: {state: succeeded}\nbind: pending\n", op: "provision", want: &plan.Status{State: "succeeded"}},
		{name: "another section's wrong field is not the operation's error",
			template: "provision: {state: succeeded}\nunbind: {state: succeeded, instanceUsable: maybe}\n", op: "provision",
			want: &plan.Status{State: "succeeded"}},
		{name: "a section the template does not render is nil",
			template: "provision: {state: succeeded}\n", op: "unbind"},
		{name: "the operation's own wrong field is its error",
			template: "provision: {state: failed, instanceUsable: maybe}\n", op: "provision",
			err: "status template output, provision: instanceUsable must be a boolean, not string"},
		{name: "the operation's own section must be a map",
			template: "provision: succeeded\n", op: "provision",
			err: "status template output, provision: want a map of state, description, ..., got a string"},
		{name: "the whole must be YAML",
			template: "provision: {state: succeeded}\nbind: [\n", op: "provision", err: "status template output: error converting YAML to JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := plan.Go("status", tc.template, tc.values, plan.FuncMap(), plan.Bounds{})
			require.NoError(t, err)
			got, err := plan.StatusOf(out, tc.op)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestSubjectStatusKeepsTheRunningOperationStrict: a state the running
// operation cannot mean fails it; the same word in another section does
// not.
func TestSubjectStatusKeepsTheRunningOperationStrict(t *testing.T) {
	subject := subjectWith(osbv1alpha1.TemplateSpec{Action: "status", Type: "gotemplate",
		Content: "provision: {state: succeeded}\nbind: {state: in_queue}\n"})
	st, err := subject.Status("provision", plan.Values{})
	require.NoError(t, err)
	assert.Equal(t, "succeeded", st.State)

	_, err = subject.Status("bind", plan.Values{})
	var te *plan.TemplateError
	require.ErrorAs(t, err, &te)
	assert.EqualError(t, err, `status template: bind.state is "in_queue"; want succeeded, failed or in progress`)
}

// TestHelmSourcesAndStatus: a helm chart serves as the sources and status
// templates, as in the inter-operator: the file named after the action is
// read, or the chart's only file.
func TestHelmSourcesAndStatus(t *testing.T) {
	properties := testenv.ChartOf(t, "properties", map[string]string{
		"templates/sources.yaml": "docker: {apiVersion: deployment.servicefabrik.io/v1alpha1, kind: Docker, name: {{ .Values.instance.metadata.name }}}\n",
		"templates/status.yaml":  "provision: {state: {{ with .Values.docker }}{{ .status.state }}{{ else }}in progress{{ end }}}\n",
		"templates/NOTES.txt":    "not read",
	})
	encoded := base64.StdEncoding.EncodeToString(properties)
	subject := subjectWith(
		osbv1alpha1.TemplateSpec{Action: "sources", Type: "helm", ContentEncoded: encoded},
		osbv1alpha1.TemplateSpec{Action: "status", Type: "helm", ContentEncoded: encoded})
	subject.Instance = &osbv1alpha1.SFServiceInstance{}
	subject.Instance.Name = "d-1"
	values, err := subject.Values(crds.NewScheme())
	require.NoError(t, err)

	list, err := subject.Sources(values)
	require.NoError(t, err)
	assert.Equal(t, map[string]plan.Source{"docker": {APIVersion: "deployment.servicefabrik.io/v1alpha1", Kind: "Docker", Name: "d-1"}}, list.Sources)

	values = values.AddSources(map[string]map[string]any{"docker": {"status": map[string]any{"state": "succeeded"}}})
	st, err := subject.Status("provision", values)
	require.NoError(t, err)
	assert.Equal(t, "succeeded", st.State)

	two := testenv.ChartOf(t, "two", map[string]string{"templates/a.yaml": "a: 1\n", "templates/b.yaml": "b: 1\n"})
	subject = subjectWith(osbv1alpha1.TemplateSpec{Action: "status", Type: "helm", ContentEncoded: base64.StdEncoding.EncodeToString(two)})
	_, err = subject.Status("provision", plan.Values{})
	assert.EqualError(t, err, "status template: helm chart two renders 2 files and none is named status.yaml")
}

func subjectWith(templates ...osbv1alpha1.TemplateSpec) *plan.Subject {
	return &plan.Subject{
		Service:  &osbv1alpha1.SFService{},
		Plan:     &osbv1alpha1.SFPlan{Spec: osbv1alpha1.SFPlanSpec{Templates: templates}},
		Registry: registry.New(registry.Instance, nil),
	}
}
