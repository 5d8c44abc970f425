package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// massGauges shows the progress of every running mass update on the API's
// /metrics. Nothing is counted in memory: each scrape lists the running
// mass updates and asks each run its progress (the query an operator's
// GET /admin/mass-updates/{name} asks), so the gauges are right on any of
// the API's replicas and after any restart.
type massGauges struct {
	s *Server
}

// massScrapeTimeout bounds one scrape's list and queries; massScrapeMax
// bounds the runs one scrape asks (an operator runs a handful at a time).
const (
	massScrapeTimeout = 5 * time.Second
	massScrapeMax     = 50
)

var (
	massInstancesDesc = prometheus.NewDesc("qm_mass_update_instances",
		"The instances of each running mass update, by state: selected (all it updates), succeeded, failed, skipped, in_flight, remaining.",
		[]string{"mass_update", "state"}, nil)
	massPausedDesc = prometheus.NewDesc("qm_mass_update_paused",
		"1 while a running mass update is paused (by its failure budget or an operator), else 0.",
		[]string{"mass_update"}, nil)
)

func (g *massGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- massInstancesDesc
	ch <- massPausedDesc
}

func (g *massGauges) Collect(ch chan<- prometheus.Metric) {
	if g.s.Temporal == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), massScrapeTimeout)
	defer cancel()
	resp, err := g.s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		PageSize: massScrapeMax,
		Query:    fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Running'", runs.MassUpdateType),
	})
	if err != nil {
		g.s.Logger.Warn("listing the running mass updates for their metrics", "error", err)
		return
	}
	for _, e := range resp.GetExecutions() {
		id := e.GetExecution().GetWorkflowId()
		p, err := g.progress(ctx, id)
		if err != nil {
			g.s.Logger.Warn("asking a mass update its progress for its metrics", "workflowId", id, "error", err)
			continue
		}
		name := strings.TrimPrefix(id, runs.MassUpdateID(""))
		for state, n := range map[string]int{"selected": p.Total, "succeeded": p.Succeeded, "failed": p.Failed,
			"skipped": p.Skipped, "in_flight": p.InFlight, "remaining": p.Remaining} {
			ch <- prometheus.MustNewConstMetric(massInstancesDesc, prometheus.GaugeValue, float64(n), name, state)
		}
		paused := 0.0
		if p.State == massupdate.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(massPausedDesc, prometheus.GaugeValue, paused, name)
	}
}

func (g *massGauges) progress(ctx context.Context, workflowID string) (massupdate.Progress, error) {
	var p massupdate.Progress
	v, err := g.s.Temporal.QueryWorkflow(ctx, workflowID, "", runs.QueryProgress)
	if err != nil {
		return p, err
	}
	return p, v.Get(&p)
}
