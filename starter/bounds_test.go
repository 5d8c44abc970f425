package starter_test

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestAbusiveTemplatesFail: a plan author cannot stop the worker with a
// template. Each abusive template, gotemplate or helm, fails its provision
// with a description that names the bound it crossed, its render process
// stopped where no check inside a render could stop it; an instance of a
// healthy plan, provisioned at the same time, succeeds while they still
// run: it waits for none of them.
//
// The render timeout is 10 s rather than the default 5 s: "while they
// still run" is then a margin no load of the machine takes away (the
// healthy provision took 5.6 s beside them once, in a full make test with
// the race detector, against 2.6 s alone).
func TestAbusiveTemplatesFail(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true, RenderTimeout: renderTimeout})
	healthy := s.Plan("healthy", "", testenv.Templates("instant"))
	abusive := map[string]struct{ template, want string }{
		"huge-range": {`{{ range until 100000000 }}{{ end }}`,
			`provision failed: provision template: template: provision:1:9: executing "provision" at <until 100000000>: error calling until: until would make more than the 67108864 bytes a render may (--render-max-memory)`},
		// Stopped at its depth, or, on a machine the other renders load,
		// at its time: either way by a bound the description names.
		"recursion": {`{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`,
			"exceeded maximum template depth (100000)|the render took longer than 10s (--render-timeout)"},
		"huge-output": {`{{ range until 1000 }}{{ repeat 1000000 "x" }}{{ end }}`,
			"provision failed: provision template: the render wrote more than 8388608 bytes (--render-max-output)"},
		// Ten billion calls that make nothing (an empty string): no
		// memory bound comes near, on a machine of any speed, so only
		// the time bound, checked at each call, stops it.
		"endless": {`{{ range 100000 }}{{ range 100000 }}{{ lower "" }}{{ end }}{{ end }}`,
			"the render took longer than 10s (--render-timeout)"},
		"gigabytes": {`{{ repeat 1000000000 "x" }}`,
			"repeat would make more than the 67108864 bytes a render may (--render-max-memory)"},
	}
	for name, a := range abusive {
		id := s.Plan(name, "", fmt.Sprintf(`  - action: provision
    type: gotemplate
    content: '%s'`, a.template))
		s.Instance(name, id, "")
	}
	// Helm's engine takes no functions of ours: a chart that makes a
	// gigabyte is stopped by its process's memory bound.
	hungry := testenv.ChartOf(t, "hungry", map[string]string{"templates/cm.yaml": `{{ repeat 1000000000 "x" | len }}`})
	id := s.Plan("helm-memory", "", fmt.Sprintf(`  - action: provision
    type: helm
    contentEncoded: %s`, base64.StdEncoding.EncodeToString(hungry)))
	s.Instance("helm-memory", id, "")
	abusive["helm-memory"] = struct{ template, want string }{"", "provision failed: provision template: the render used more than 268435456 bytes of memory (4 times --render-max-memory); its render process was stopped"}
	s.Instance("healthy-1", healthy, "")
	s.WaitInstance("healthy-1", "succeeded", testenv.Succeeded(1))
	assert.NotEqual(t, osbv1alpha1.StateFailed, stateOf(t, s, "endless"),
		"the healthy instance succeeded while the endless render still ran: it waited for none of the abusive ones")

	for name, a := range abusive {
		inst := s.WaitInstance(name, "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
			return i.Status.State == osbv1alpha1.StateFailed
		})
		// want is one message, or alternatives separated by "|".
		assert.True(t, slices.ContainsFunc(strings.Split(a.want, "|"), func(w string) bool { return strings.Contains(inst.Status.Description, w) }),
			"%s: %q names none of %q", name, inst.Status.Description, a.want)
	}

	// A range over 10^12 calls no function and writes nothing: no check
	// inside the render can stop it, only its process's end. Apart from
	// the others, whose CPU it would take on two cores.
	id = s.Plan("integer-range", "", `  - action: provision
    type: gotemplate
    content: '{{ range 1000000000000 }}{{ end }}'`)
	s.Instance("integer-range", id, "")
	s.Instance("healthy-2", healthy, "")
	s.WaitInstance("healthy-2", "succeeded", testenv.Succeeded(1))
	assert.NotEqual(t, osbv1alpha1.StateFailed, stateOf(t, s, "integer-range"),
		"the healthy instance succeeded while the endless range still ran")
	inst := s.WaitInstance("integer-range", "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
		return i.Status.State == osbv1alpha1.StateFailed
	})
	// The process's own answer at the timeout, after which it exits; or,
	// had it not answered, the pool's kill half a second later.
	assert.Contains(t, inst.Status.Description, "provision failed: provision template: the render took longer than 10s (--render-timeout)")
}

// stateOf is the state of the instance name now.
func stateOf(t *testing.T, s *testenv.System, name string) osbv1alpha1.OperationState {
	t.Helper()
	inst, err := s.GetInstance(name)
	require.NoError(t, err)
	return inst.Status.State
}

// renderTimeout is TestAbusiveTemplatesFail's --render-timeout.
const renderTimeout = 10 * time.Second
