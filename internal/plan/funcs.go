package plan

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"text/template"

	"github.com/BurntSushi/toml"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster/qm/internal/registry"
)

// forbidden are sprig functions a plan author must not have: they read the
// worker's environment or reach the network from inside a render.
var forbidden = []string{"env", "expandenv", "getHostByName"}

// Funcs returns every function a gotemplate plan template can call:
// FuncMap's, and the functions that read and keep values in reg, the
// registry of the instance or binding the template is rendered for.
func Funcs(reg *registry.Registry) template.FuncMap {
	f := FuncMap()
	maps.Copy(f, reg.Funcs())
	return f
}

// FuncMap returns the functions of a gotemplate plan template that need no
// registry: sprig's, less the forbidden ones, with the inter-operator's
// serialisation functions. Those return errors instead of folding them into
// the output, so that a bad value fails the render with a message rather
// than applying garbage.
func FuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	for _, name := range forbidden {
		delete(f, name)
	}
	for name, fn := range map[string]any{
		"b64enc":        b64enc,
		"b64dec":        b64dec,
		"toJson":        toJSON,
		"marshalJSON":   toJSON,
		"fromJson":      fromJSON,
		"unmarshalJSON": fromJSON,
		"toYaml":        toYAML,
		"fromYaml":      fromYAML,
		"toToml":        toTOML,
	} {
		f[name] = fn
	}
	return f
}

func b64enc(v any) string {
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
}

func b64dec(s string) (string, error) {
	out, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("b64dec: %w", err)
	}
	return string(out), nil
}

func toJSON(v any) (string, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toJson: %w", err)
	}
	return string(out), nil
}

func fromJSON(s string) (any, error) {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("fromJson: %w", err)
	}
	return v, nil
}

// toYAML trims the final newline, as Helm's does, so that
// `toYaml . | nindent 4` lays out as the inter-operator's templates expect.
func toYAML(v any) (string, error) {
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}

func fromYAML(s string) (any, error) {
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("fromYaml: %w", err)
	}
	return v, nil
}

func toTOML(v any) (string, error) {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(v); err != nil {
		return "", fmt.Errorf("toToml: %w", err)
	}
	return b.String(), nil
}
