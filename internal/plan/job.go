package plan

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster/qm/internal/registry"
)

// Job is one render, in a form a render process can take: all it reads,
// as JSON-shaped data.
type Job struct {
	// Name and Content are a gotemplate's; Chart (an archive) and File a
	// helm chart's: the file whose base name is File, or with File empty
	// every file, for objects.
	Name, Content string
	Chart         []byte         `json:",omitempty"`
	Release       Release        `json:",omitzero"`
	ChartValues   map[string]any `json:",omitempty"`
	File          string         `json:",omitempty"`
	Values        Values
	// Registry is the gotemplate's registry, encoded (RegistryKind empty:
	// none); the render may set values in it.
	RegistryKind registry.Kind     `json:",omitempty"`
	Registry     map[string][]byte `json:",omitempty"`
	Bounds       Bounds
}

// Result is what a Job rendered: a gotemplate's text, or a chart's file or
// files in order; and the registry, when the render set a value in it.
type Result struct {
	Text string
	// Chart is the chart's name, for messages about its files.
	Chart    string            `json:",omitempty"`
	Files    []File            `json:",omitempty"`
	Registry map[string][]byte `json:",omitempty"`
}

// File is one rendered file of a chart.
type File struct{ Name, Text string }

// ErrRenderUnavailable marks a render that a Runner could not run (its
// process would not start, or died of something other than a bound): not
// the template's fault, so the operation tries again.
var ErrRenderUnavailable = errors.New("the render could not run")

// Runner renders Jobs: a pool of render processes (internal/renderproc),
// whose bounds are the operating system's. A Subject without one renders
// in its own process (Run).
type Runner interface {
	Run(Job) (Result, error)
}

// Run renders job in this process, within its bounds as far as one
// process can keep them: a render process runs this.
func Run(job Job) (Result, error) {
	var reg *registry.Registry
	if job.RegistryKind != "" {
		var err error
		if reg, err = registry.Decode(job.RegistryKind, job.Registry); err != nil {
			return Result{}, err
		}
	}
	var res Result
	switch {
	case job.Chart == nil:
		out, err := Go(job.Name, job.Content, job.Values, Funcs(reg), job.Bounds)
		if err != nil {
			return Result{}, err
		}
		res.Text = out
	default:
		ch, err := LoadChart(job.Chart)
		if err != nil {
			return Result{}, err
		}
		if job.File != "" {
			out, err := HelmFile(ch, job.Release, job.ChartValues, job.Values, job.Bounds, job.File)
			if err != nil {
				return Result{}, err
			}
			res.Text = out
			break
		}
		files, err := helmFiles(ch, job.Release, job.ChartValues, job.Values, job.Bounds)
		if err != nil {
			return Result{}, err
		}
		res.Chart, res.Files = ch.Name(), files
	}
	if reg != nil && reg.Changed() {
		data, err := reg.Encode()
		if err != nil {
			return Result{}, err
		}
		res.Registry = data
	}
	return res, nil
}

// run renders job with s's Runner, or in this process; a registry the
// render set values in is the Subject's from then on.
func (s *Subject) run(job Job) (Result, error) {
	job.Bounds = s.Bounds.withDefaults()
	if s.Runner == nil {
		return s.runHere(job)
	}
	if s.Registry != nil && job.Chart == nil {
		data, err := s.Registry.Encode()
		if err != nil {
			return Result{}, err
		}
		job.RegistryKind, job.Registry = s.Registry.Kind(), data
	}
	res, err := s.Runner.Run(job)
	if err != nil {
		return Result{}, err
	}
	if res.Registry != nil {
		if err := s.Registry.Adopt(res.Registry); err != nil {
			return Result{}, fmt.Errorf("the registry the render set: %w", err)
		}
	}
	return res, nil
}

// runHere renders job in this process, with the Subject's own registry
// (no copy to encode and decode).
func (s *Subject) runHere(job Job) (Result, error) {
	if job.Chart != nil {
		return Run(job)
	}
	out, err := Go(job.Name, job.Content, job.Values, Funcs(s.Registry), job.Bounds)
	return Result{Text: out}, err
}

// objectsOf decodes a chart's rendered files into objects, in order.
func objectsOf(chartName string, files []File) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, f := range files {
		o, err := Objects(f.Text)
		if err != nil {
			return nil, fmt.Errorf("helm chart %s, %s: %w", chartName, f.Name, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}
