package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	qmchart "github.com/quartermaster/qm/deploy/chart"
	"github.com/quartermaster/qm/internal/testenv"
)

// rulesFile is the chart's alert rules, a Prometheus rule file.
const rulesFile = "quartermaster/files/alerts/quartermaster.rules.yaml"

// promtool runs bin/promtool and fails the test with its output if it fails.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	return string(out)
}

// TestAlertRules: promtool checks the chart's alert rules (Prometheus's own
// rule parser: the PromQL of each expression, the templates of each
// annotation), and its unit tests show each alert firing on the series
// that should raise it and quiet on a healthy neighbour
// (testdata/alerts_test.yaml).
func TestAlertRules(t *testing.T) {
	assert.Contains(t, promtool(t, ".", "check", "rules", rulesFile), "SUCCESS: 8 rules found")
	assert.Contains(t, promtool(t, "testdata", "test", "rules", "alerts_test.yaml"), "SUCCESS")
}

// TestChartShipsDashboardAndAlerts: with both enabled, the chart renders the
// dashboard's ConfigMap (with the sidecar's label) holding the generated
// dashboard, and a PrometheusRule whose spec promtool accepts as a rule
// file, the same rules as the file.
func TestChartShipsDashboardAndAlerts(t *testing.T) {
	objs := render(t, load(t), "monitoring", "metrics.dashboard.enabled=true,metrics.prometheusRule.enabled=true,"+
		"metrics.prometheusRule.labels.release=kube-prometheus")
	cm := objs["ConfigMap/qm-quartermaster-dashboard"]
	require.NotNil(t, cm, "the dashboard's ConfigMap")
	assert.Equal(t, "1", cm.GetLabels()["grafana_dashboard"], "the label Grafana's sidecar selects")
	want, err := qmchart.DashboardJSON()
	require.NoError(t, err)
	assert.JSONEq(t, string(want), dig(cm.Object, "data", "quartermaster.json").(string))

	rule := objs["PrometheusRule/qm-quartermaster"]
	require.NotNil(t, rule, "the PrometheusRule")
	assert.Equal(t, "kube-prometheus", rule.GetLabels()["release"])
	spec, err := yaml.Marshal(rule.Object["spec"])
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "rendered.rules.yaml")
	require.NoError(t, os.WriteFile(path, spec, 0o600))
	assert.Contains(t, promtool(t, ".", "check", "rules", path), "SUCCESS: 8 rules found")

	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	fromFile, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	rendered, err := yaml.YAMLToJSON(spec)
	require.NoError(t, err)
	assert.JSONEq(t, string(fromFile), string(rendered), "the PrometheusRule holds the file's rules as they are")
}
