package bindingusage

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHashKeyUsage(t *testing.T) {
	for key, want := range map[string]string{
		HashKey("web-db"):                "web-db",
		HashKey("sb-api-db"):             "sb-api-db",
		"binding-hash.quartermaster.io/": "",
		LabelKey("web-db"):               "",
		"example.com/other":              "",
	} {
		got, ok := HashKeyUsage(key)
		assert.Equal(t, want, got, key)
		assert.Equal(t, want != "", ok, key)
	}
}

// TestDropField: the rollout manager gives up one annotation of a pod
// template and keeps the others; the sets it empties go with it.
func TestDropField(t *testing.T) {
	a, b := "f:"+HashKey("a"), "f:"+HashKey("b")
	for _, tc := range []struct {
		name, in, out  string
		dropped, empty bool
	}{
		{name: "one of two", in: `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"` + a + `":{},"` + b + `":{}}}}}}`,
			out: `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"` + b + `":{}}}}}}`, dropped: true},
		{name: "the last", in: `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"` + a + `":{}}}}}}`,
			out: `{}`, dropped: true, empty: true},
		{name: "another kind's path", in: `{"f:spec":{"f:jobTemplate":{"f:metadata":{"f:annotations":{"` + a + `":{}}},"f:replicas":{}}}}`,
			out: `{"f:spec":{"f:jobTemplate":{"f:replicas":{}}}}`, dropped: true},
		{name: "not there", in: `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"` + b + `":{}}}}}}`,
			out: `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"` + b + `":{}}}}}}`},
		{name: "a whole set owned stays", in: `{"f:metadata":{"f:labels":{}}}`, out: `{"f:metadata":{"f:labels":{}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, dropped, empty, err := DropField([]byte(tc.in), HashKey("a"))
			require.NoError(t, err)
			assert.JSONEq(t, tc.out, string(out))
			assert.Equal(t, tc.dropped, dropped)
			assert.Equal(t, tc.empty, empty)
		})
	}
	_, _, _, err := DropField([]byte(`[`), HashKey("a"))
	assert.ErrorContains(t, err, "reading a managed fields set")
}
