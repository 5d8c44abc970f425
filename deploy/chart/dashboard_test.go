package chart_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quartermaster/qm/deploy/chart"
)

// update has TestDashboardIsGenerated write the dashboard (make generate).
var update = flag.Bool("update", false, "write the chart's dashboard JSON from chart.Dashboard")

// TestDashboardIsGenerated: the chart's dashboard is what chart.Dashboard
// builds; `make generate` writes it again.
func TestDashboardIsGenerated(t *testing.T) {
	want, err := chart.DashboardJSON()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(chart.DashboardFile, want, 0o644))
	}
	got, err := os.ReadFile(chart.DashboardFile)
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got), "the chart's dashboard is stale: run make generate")
}

// TestDashboardLoads: the dashboard's JSON loads into Grafana's schema (the
// Foundation SDK's types) with every field known, validates, and every
// panel queries Prometheus.
func TestDashboardLoads(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	raw, err := os.ReadFile(chart.DashboardFile)
	require.NoError(t, err)
	var d dashboard.Dashboard
	// Strictly: every field of the file is one the schema's types know, so
	// that writing what was read gives the file back. (The SDK's own
	// UnmarshalJSONStrict drops panels in this release: its panels' empty
	// error lists count as errors.)
	require.NoError(t, json.Unmarshal(raw, &d))
	again, err := json.Marshal(d)
	require.NoError(t, err)
	assert.JSONEq(t, string(raw), string(again), "the dashboard holds fields Grafana's schema does not know")
	require.NoError(t, noBuildErrors(d.Validate()))
	assert.Equal(t, chart.DashboardUID, *d.Uid)
	queries := 0
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue // a row
		}
		require.NotEmpty(t, p.Panel.Targets, "panel %q queries something", *p.Panel.Title)
		for _, target := range p.Panel.Targets {
			q, ok := target.(*prometheus.Dataquery)
			require.True(t, ok, "panel %q queries Prometheus, not %T", *p.Panel.Title, target)
			assert.NotEmpty(t, q.Expr, "panel %q", *p.Panel.Title)
			queries++
		}
	}
	assert.GreaterOrEqual(t, queries, 15)
	var plain map[string]any
	require.NoError(t, json.Unmarshal(raw, &plain))
	assert.Equal(t, "Quartermaster", plain["title"])
}

// noBuildErrors is err, or nil for an empty cog.BuildErrors: the SDK
// returns its error list even when it is empty.
func noBuildErrors(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}
