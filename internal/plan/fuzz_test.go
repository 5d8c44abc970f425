package plan_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/quartermaster/qm/internal/plan"
)

// fuzzBounds are small, so that the fuzzer reaches them often.
var fuzzBounds = plan.Bounds{Timeout: 200 * time.Millisecond, MaxOutput: 1 << 16, MaxMemory: 1 << 20}

// FuzzGo renders arbitrary template text with arbitrary values: no input
// panics, and none escapes its bounds (time and output).
func FuzzGo(f *testing.F) {
	for _, seed := range []struct{ tmpl, values string }{
		{`apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .instance.metadata.name | quote }}}
data: {size: {{ .size | default "s" | quote }}}`, `{"instance": {"metadata": {"name": "i-1"}}, "size": "m"}`},
		{`{{ range until 10 }}{{ . }}{{ end }}{{ toYaml .x }}`, `{"x": [1, "a", {"b": null}]}`},
		{`{{ printf "%05d" 3 }}{{ repeat 3 "ab" }}{{ cat "a" "b" | upper }}`, `{}`},
		{`{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}`, `null`},
		{`{{ $s := "xx" }}{{ range until 30 }}{{ $s = cat $s $s }}{{ end }}`, `{}`},
		{`{{ fromYaml .y | toJson }}{{ b64dec .z }}{{ index .l 5 }}`, `{"y": "a: [1,2", "z": "!!", "l": [1]}`},
	} {
		f.Add(seed.tmpl, seed.values)
	}
	f.Fuzz(func(t *testing.T, tmpl, values string) {
		var v map[string]any
		_ = json.Unmarshal([]byte(values), &v)
		start := time.Now()
		out, _ := plan.Go("fuzz", tmpl, v, plan.FuncMap(), fuzzBounds)
		if took := time.Since(start); took > fuzzBounds.Timeout+time.Second {
			t.Fatalf("the render took %s, beyond its %s", took, fuzzBounds.Timeout)
		}
		if int64(len(out)) > fuzzBounds.MaxOutput {
			t.Fatalf("the render wrote %d bytes, beyond its %d", len(out), fuzzBounds.MaxOutput)
		}
	})
}

// FuzzObjects splits arbitrary rendered text into objects: no input
// panics, and every object it returns has a kind and a name.
func FuzzObjects(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n",
		"---\n---\n",
		"a: |\n  ---\n  b\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [1]}\n",
		"&a [*a]",
		"{",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rendered string) {
		objs, err := plan.Objects(rendered)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetName() == "" || o.GetAPIVersion() == "" {
				t.Fatalf("an object without kind, name or apiVersion: %v", o.Object)
			}
		}
	})
}
