package starter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	"github.com/quartermaster/qm/internal/testenv"
)

// TestAbusiveTemplatesFail: a plan author cannot stop the worker with a
// template. Each abusive template fails its provision with a description
// that names the bound it crossed; an instance of a healthy plan,
// provisioned at the same time, succeeds on time.
func TestAbusiveTemplatesFail(t *testing.T) {
	s := testenv.Start(t, testenv.Parts{Worker: true, Watcher: true})
	healthy := s.Plan("healthy", "", testenv.Templates("instant"))
	abusive := map[string]struct{ template, want string }{
		"huge-range": {`{{ range until 100000000 }}{{ end }}`,
			`provision failed: provision template: template: provision:1:9: executing "provision" at <until 100000000>: error calling until: until would make more than the 67108864 bytes a render may (--render-max-memory)`},
		"recursion": {`{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`,
			"exceeded maximum template depth (100000)"},
		"huge-output": {`{{ range until 1000 }}{{ repeat 1000000 "x" }}{{ end }}`,
			"provision failed: provision template: the render wrote more than 8388608 bytes (--render-max-output)"},
		"endless": {`{{ range until 100000 }}{{ range until 100000 }}{{ add 1 1 }}{{ end }}{{ end }}`,
			"the render took longer than 5s (--render-timeout)"},
	}
	for name, a := range abusive {
		id := s.Plan(name, "", fmt.Sprintf(`  - action: provision
    type: gotemplate
    content: '%s'`, a.template))
		s.Instance(name, id, "")
	}
	start := time.Now()
	s.Instance("healthy-1", healthy, "")
	s.WaitInstance("healthy-1", "succeeded", testenv.Succeeded(1))
	took := time.Since(start)
	t.Logf("the healthy instance succeeded in %s beside the abusive ones", took.Round(time.Millisecond))
	assert.Less(t, took, 5*time.Second, "the healthy instance is not held up")

	for name, a := range abusive {
		inst := s.WaitInstance(name, "failed", func(i *osbv1alpha1.SFServiceInstance) bool {
			return i.Status.State == osbv1alpha1.StateFailed
		})
		assert.Contains(t, inst.Status.Description, a.want, name)
	}
}
