// Package parameters checks the parameters of a request against the
// schemas of its plan (spec.schemas, as in the OSB catalog). The OSB API and
// the worker use the same Checker, so an instance created with kubectl is
// held to the same schema as one created through OSB.
package parameters

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
)

// Use names which of a plan's schemas applies to a request.
type Use struct {
	Object string // service_instance or service_binding
	Action string // create or update
}

// The schemas of a plan.
var (
	InstanceCreate = Use{"service_instance", "create"}
	InstanceUpdate = Use{"service_instance", "update"}
	BindingCreate  = Use{"service_binding", "create"}
)

// Violation is parameters that do not match the plan's schema: the
// requester's mistake, which names each field at fault.
type Violation struct {
	Message string
}

func (v *Violation) Error() string { return v.Message }

// Checker compiles the parameter schemas of plans, once per plan version.
// A plan's schema declares its draft with $schema (drafts 4, 6, 7, 2019-09
// and 2020-12); without one, draft 7 is assumed, as most OSB catalogs use it.
// The zero Checker is ready to use and safe for concurrent use.
type Checker struct {
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema // by plan UID, resourceVersion and use
}

// maxCompiledSchemas bounds the cache; plans change rarely, so dropping it
// all when full costs only a recompile.
const maxCompiledSchemas = 1024

// Check checks params (nil meaning none) against the plan's schema for
// use. A plan without that schema accepts any object. Parameters that do not
// match are a *Violation; any other error is the plan's (a schema that does
// not compile).
func (s *Checker) Check(plan *osbv1alpha1.SFPlan, use Use, params json.RawMessage) error {
	sch, err := s.schema(plan, use)
	if err != nil {
		return err
	}
	if sch == nil {
		return nil
	}
	if len(bytes.TrimSpace(params)) == 0 || string(bytes.TrimSpace(params)) == "null" {
		params = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return &Violation{fmt.Sprintf("parameters are not valid JSON: %v", err)}
	}
	var verr *jsonschema.ValidationError
	if err := sch.Validate(inst); errors.As(err, &verr) {
		return &Violation{fmt.Sprintf("parameters do not match the %s %s schema of plan %q: %s",
			use.Object, use.Action, plan.Spec.Name, describeViolations(verr))}
	} else if err != nil {
		return &Violation{fmt.Sprintf("validating parameters: %v", err)}
	}
	return nil
}

func (s *Checker) schema(plan *osbv1alpha1.SFPlan, use Use) (*jsonschema.Schema, error) {
	if plan.Spec.Schemas == nil {
		return nil, nil
	}
	key := string(plan.UID) + "/" + plan.ResourceVersion + "/" + use.Object + "/" + use.Action
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[key]; ok {
		return sch, nil
	}
	var doc struct {
		ServiceInstance map[string]struct {
			Parameters json.RawMessage `json:"parameters"`
		} `json:"service_instance"`
		ServiceBinding map[string]struct {
			Parameters json.RawMessage `json:"parameters"`
		} `json:"service_binding"`
	}
	if err := json.Unmarshal(plan.Spec.Schemas.Raw, &doc); err != nil {
		return nil, fmt.Errorf("plan %q has schemas that are not OSB schemas: %w", plan.Spec.Name, err)
	}
	byAction := doc.ServiceInstance
	if use.Object == "service_binding" {
		byAction = doc.ServiceBinding
	}
	raw := byAction[use.Action].Parameters
	var sch *jsonschema.Schema
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		var err error
		if sch, err = compile(raw); err != nil {
			return nil, fmt.Errorf("plan %q: its %s %s parameters schema does not compile: %w", plan.Spec.Name, use.Object, use.Action, err)
		}
	}
	if s.compiled == nil || len(s.compiled) >= maxCompiledSchemas {
		s.compiled = map[string]*jsonschema.Schema{}
	}
	s.compiled[key] = sch
	return sch, nil
}

// compile compiles one schema. References outside the schema are refused:
// a plan must not make the broker read files or fetch URLs.
func compile(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(noLoader{})
	const url = "urn:quartermaster:plan-parameters"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// noLoader refuses every external $ref.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

// english prints the schema library's messages.
var english = message.NewPrinter(language.English)

// describeViolations lists the innermost violations, each with the field it
// is about, e.g. `parameters/foo: got number, want string`.
func describeViolations(err *jsonschema.ValidationError) string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			field := strings.Join(append([]string{"parameters"}, e.InstanceLocation...), "/")
			out = append(out, field+": "+e.ErrorKind.LocalizedString(english))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(err)
	slices.Sort(out)
	return strings.Join(slices.Compact(out), "; ")
}
