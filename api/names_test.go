package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quartermaster/qm/api"
)

func TestResourceName(t *testing.T) {
	// A GUID, as platforms send, is a valid name and is kept.
	assert.Equal(t, "0304b210-fcfd-11e8-a31b-b6001f10c97f", api.ResourceName("0304b210-fcfd-11e8-a31b-b6001f10c97f"))
	// Anything else becomes its SHA-224 sum: stable, valid, 56 characters.
	for _, id := range []string{"Upper-Case", "with space", "under_score", strings.Repeat("a", 254), ""} {
		name := api.ResourceName(id)
		assert.Regexp(t, `^[0-9a-f]{56}$`, name, id)
		assert.Equal(t, name, api.ResourceName(id), "stable")
	}
	// echo -n 'Upper-Case' | sha224sum
	assert.Equal(t, "7cb502ab654c49bbaec5c4faf928a2daf002de82c1618f91a260da2e", api.ResourceName("Upper-Case"))
}

func TestBindingName(t *testing.T) {
	for _, tc := range []struct {
		id     string
		hashed bool
	}{
		{"0304b210-fcfd-11e8-a31b-b6001f10c97f", false}, // a GUID: no 'r' can follow a dash
		{"app", false},
		{"app-r", false},
		{"app-rx1", false},
		{"app-r1", true}, // the successor name of binding app's first generation
		{"app-r12", true},
		{"Upper-Case", true},
	} {
		name := api.BindingName(tc.id)
		if tc.hashed {
			assert.Regexp(t, `^[0-9a-f]{56}$`, name, tc.id)
			continue
		}
		assert.Equal(t, tc.id, name)
	}
}
