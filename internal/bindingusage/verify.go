package bindingusage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	sc "github.com/quartermaster/qm/crds/servicecatalog/v1alpha1"
)

// Result is how a check of Verify ended.
type Result string

const (
	Pass Result = "pass"
	Fail Result = "FAIL"
	Skip Result = "skip"
)

// Check is one line of Verify's checklist.
type Check struct {
	Name   string
	Result Result
	Detail string
}

// VerifyOptions say what Verify checks a UsageKind against.
type VerifyOptions struct {
	// Namespace and Workload name a sample object of the kind; without a
	// Workload, the first object of the kind in Namespace (or anywhere) is
	// the sample.
	Namespace, Workload string
	// ServiceAccount ("namespace:name") is the identity whose RBAC is
	// checked (SubjectAccessReview); empty: the caller's own.
	ServiceAccount string
	// DryRun is the client the injection is dry-run with (default: the
	// caller's).
	DryRun ctrlclient.Client
}

// Verify is Kyma's easy acceptance test of a UsageKind: does its
// resource resolve; may the identity get, list, watch and patch it; do
// labelsPath and the containers path exist in a sample; does the API
// server accept an injection (server-side dry run). It returns the
// checklist; an error only when the UsageKind cannot be read.
func Verify(ctx context.Context, c ctrlclient.Client, name string, o VerifyOptions) ([]Check, error) {
	var kind sc.UsageKind
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &kind); err != nil {
		return nil, fmt.Errorf("reading UsageKind %s: %w", name, err)
	}
	var checks []Check
	add := func(name string, r Result, format string, args ...any) {
		checks = append(checks, Check{Name: name, Result: r, Detail: fmt.Sprintf(format, args...)})
	}
	mapping, err := Resolve(c.RESTMapper(), kind.Spec.Resource)
	if err != nil {
		add("resolves", Fail, "%v", err)
		return checks, nil
	}
	gvr := mapping.Resource
	add("resolves", Pass, "%s, kind %s, resource %s", gvr.GroupVersion(), mapping.GroupVersionKind.Kind, gvr.GroupResource())
	who := "I"
	if o.ServiceAccount != "" {
		who = o.ServiceAccount
	}
	for _, verb := range Verbs {
		missing, err := AccessOf(ctx, c, gvr, o.Namespace, o.ServiceAccount, []string{verb})
		switch {
		case err != nil:
			add("RBAC "+verb, Fail, "%v", err)
		case len(missing) > 0:
			add("RBAC "+verb, Fail, "%s may not %s %s: missing the rule %s", who, verb, gvr.GroupResource(), missing[0])
		default:
			add("RBAC "+verb, Pass, "%s may %s %s", who, verb, gvr.GroupResource())
		}
	}
	sample, err := sampleOf(ctx, c, mapping.GroupVersionKind.GroupVersion().WithKind(mapping.GroupVersionKind.Kind), o)
	if err != nil {
		add("sample", Fail, "%v", err)
		return checks, nil
	}
	if sample == nil {
		add("sample", Skip, "no %s to check the paths against: pass --namespace and --workload", mapping.GroupVersionKind.Kind)
		return checks, nil
	}
	add("sample", Pass, "%s %s/%s", sample.GetKind(), sample.GetNamespace(), sample.GetName())
	labelsErr := CheckLabels(sample, kind.Spec.LabelsPath)
	if labelsErr != nil {
		add("labelsPath", Fail, "%v", labelsErr)
	} else {
		add("labelsPath", Pass, "%s", kind.Spec.LabelsPath)
	}
	path, err := ContainersPath(sample, kind.Spec.ContainersPath)
	var containers []map[string]any
	if err == nil {
		containers, err = Containers(sample, path)
	}
	if err != nil {
		add("containersPath", Fail, "%v", err)
		return checks, nil
	}
	add("containersPath", Pass, "%s (%d containers)", path, len(containers))
	if labelsErr != nil {
		add("injection", Skip, "not tried: labelsPath is wrong")
		return checks, nil
	}
	dry := o.DryRun
	if dry == nil {
		dry = c
	}
	in := Injection{Usage: "qm-verify", Binding: "qm-verify", Secret: "qm-verify", Keys: []string{"KEY"}, Hash: "0", EnvPrefix: "QM_VERIFY_"}
	apply, _, err := in.Apply(sample, Paths{Labels: kind.Spec.LabelsPath, Containers: path})
	if err == nil {
		err = dry.Patch(ctx, apply, ctrlclient.Apply, ctrlclient.FieldOwner("qm-verify"), ctrlclient.DryRunAll)
	}
	if err != nil {
		add("injection", Fail, "a server-side dry run of the injection was refused: %v", err)
	} else {
		add("injection", Pass, "the API server accepts an injection (server-side dry run)")
	}
	return checks, nil
}

// Failed counts the failed checks.
func Failed(checks []Check) int {
	n := 0
	for _, c := range checks {
		if c.Result == Fail {
			n++
		}
	}
	return n
}

// sampleOf reads the named workload, or the first of its kind.
func sampleOf(ctx context.Context, c ctrlclient.Client, gvk schema.GroupVersionKind, o VerifyOptions) (*unstructured.Unstructured, error) {
	if o.Workload != "" {
		if o.Namespace == "" {
			return nil, errors.New("--workload needs --namespace")
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Workload}, u); err != nil {
			return nil, fmt.Errorf("reading %s %s/%s: %w", gvk.Kind, o.Namespace, o.Workload, err)
		}
		return u, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []ctrlclient.ListOption{ctrlclient.Limit(1)}
	if o.Namespace != "" {
		opts = append(opts, ctrlclient.InNamespace(o.Namespace))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing %s: %w", strings.ToLower(gvk.Kind)+"s", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}
