// Package chart builds what the Helm chart ships that is better written in
// Go than by hand: its Grafana dashboard, with Grafana's Foundation SDK.
// `make generate` writes it into the chart (DashboardFile); the chart's
// tests load it against the SDK's schema and check that every query names
// a metric Quartermaster serves.
package chart

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// DashboardFile is the dashboard's JSON in the chart, relative to this
// package.
const DashboardFile = "quartermaster/files/dashboards/quartermaster.json"

// DashboardUID is the dashboard's UID: its URL in Grafana is /d/quartermaster.
const DashboardUID = "quartermaster"

// The queries take the largest of the replicas' gauges (every API replica
// serves the mass updates'; around a watcher's failover, two watchers may
// serve the fleet's) and sum the counters of every worker.
// They query by the metric's labels only, so they work under any job name.
var datasource = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}

// DashboardJSON is the dashboard as the chart ships it.
func DashboardJSON() ([]byte, error) {
	d, err := Dashboard()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing the dashboard as JSON: %w", err)
	}
	return append(out, '\n'), nil
}

// Dashboard is the fleet at a glance: operations by outcome, their
// durations by plan and their failures by kind; instances and bindings by
// state; the clusters' use; the registry's services, checks and claims;
// mass updates in progress; and the workers polling.
func Dashboard() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("Quartermaster").
		Uid(DashboardUID).
		Tags([]string{"quartermaster"}).
		Description("Operations, instances, clusters, the service registry and mass updates of Quartermaster.").
		Refresh("1m").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithRow(dashboard.NewRowBuilder("Operations")).
		WithPanel(panel("Operations per minute, by outcome", "ops/min",
			query(`sum by (outcome) (rate(qm_operations_ended_total[$__rate_interval])) * 60`, "{{outcome}}"))).
		WithPanel(panel("Failures per minute, by operation and kind", "ops/min",
			query(`sum by (operation, kind) (rate(qm_operations_ended_total{outcome!="succeeded"}[$__rate_interval])) * 60`, "{{operation}} {{kind}}"))).
		WithPanel(panel("Provision time p50 and p99, by plan", "s",
			query(`histogram_quantile(0.5, sum by (plan, le) (rate(qm_operation_duration_seconds_bucket{operation="provision"}[$__rate_interval])))`, "p50 {{plan}}"),
			query(`histogram_quantile(0.99, sum by (plan, le) (rate(qm_operation_duration_seconds_bucket{operation="provision"}[$__rate_interval])))`, "p99 {{plan}}"))).
		WithPanel(panel("Operation time p99, by operation", "s",
			query(`histogram_quantile(0.99, sum by (operation, le) (rate(qm_operation_duration_seconds_bucket[$__rate_interval])))`, "{{operation}}"))).
		WithRow(dashboard.NewRowBuilder("Instances and clusters")).
		WithPanel(panel("Instances by state", "short",
			query(`sum by (state) (max by (service, plan, state, shard) (qm_instances))`, "{{state}}"))).
		WithPanel(panel("Bindings by state", "short",
			query(`sum by (state) (max by (service, plan, state, shard) (qm_bindings))`, "{{state}}"))).
		WithPanel(panel("Instances waiting for a cluster, by plan", "short",
			query(`sum by (plan) (max by (service, plan, shard) (qm_instances_waiting_for_cluster))`, "{{plan}}"))).
		WithPanel(panel("Cluster use against its limit", "percentunit",
			query(`max by (namespace, cluster, resource) (qm_cluster_use_ratio)`, "{{cluster}} {{resource}}"),
			query(`max by (namespace, cluster) (qm_cluster_limit_ratio)`, "{{cluster}} limit"))).
		WithPanel(panel("Instances and reservations per cluster", "short",
			query(`max by (namespace, cluster) (qm_cluster_instances)`, "{{cluster}} instances"),
			query(`sum by (namespace, cluster) (max by (namespace, cluster, shard) (qm_cluster_reservations))`, "{{cluster}} reserved"),
			query(`count by (namespace) (max by (namespace, cluster) (qm_cluster_ready) == 0)`, "{{namespace}} unreachable clusters"))).
		WithRow(dashboard.NewRowBuilder("Service registry")).
		WithPanel(panel("Registered services by state", "short",
			query(`sum by (state) (max by (namespace, state) (qm_registered_services))`, "{{state}}"))).
		WithPanel(panel("Health checks per minute, by kind and result", "ops/min",
			query(`sum by (kind, result) (rate(qm_health_checks_total[$__rate_interval])) * 60`, "{{kind}} {{result}}"))).
		WithPanel(panel("Health check time p99, by kind", "s",
			query(`histogram_quantile(0.99, sum by (kind, le) (rate(qm_health_check_duration_seconds_bucket[$__rate_interval])))`, "{{kind}}"))).
		WithPanel(panel("Claims, usages and ServiceBindings", "short",
			query(`sum by (state) (max by (namespace, state) (qm_service_claims))`, "claims {{state}}"),
			query(`sum by (state) (max by (namespace, state) (qm_binding_usages))`, "usages {{state}}"),
			query(`sum by (ready) (max by (namespace, ready) (qm_service_bindings))`, "ServiceBindings ready={{ready}}"))).
		WithRow(dashboard.NewRowBuilder("Mass updates and workers")).
		WithPanel(panel("Mass updates in progress", "short",
			query(`max by (mass_update, state) (qm_mass_update_instances{state=~"succeeded|failed|skipped|in_flight|remaining"})`, "{{mass_update}} {{state}}"),
			query(`max by (mass_update) (qm_mass_update_paused) > 0`, "{{mass_update}} paused"))).
		WithPanel(panel("Workers polling the task queue", "short",
			query(`sum by (poller_type) (temporal_num_pollers)`, "{{poller_type}}")))
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("building the dashboard: %w", err)
	}
	return d, nil
}

// panel is a time series of queries, half the dashboard wide.
func panel(title, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Unit(unit).Min(0).Datasource(datasource).Height(8).Span(12).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for i, q := range queries {
		p.WithTarget(q.RefId(string(rune('A' + i))))
	}
	return p
}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).Datasource(datasource)
}

func ptr[T any](v T) *T { return &v }
