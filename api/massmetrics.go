package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// massGauges shows the progress of every running mass update on the API's
// /metrics. Nothing is counted in memory: a scrape lists the running mass
// updates and asks each run its progress (the query an operator's GET
// /admin/mass-updates/{name} asks), so the gauges are right on any of the
// API's replicas and after any restart. What it read serves the scrapes of
// the next massRefresh too: however often, and by however many, /metrics
// is scraped, Temporal is asked at most once in that time.
type massGauges struct {
	s *Server

	mu   sync.Mutex
	at   time.Time // when read was last asked; zero: never
	read []prometheus.Metric
}

// massScrapeTimeout bounds one scrape's list and queries; massScrapeMax
// bounds the runs one scrape asks (an operator runs a handful at a time);
// massRefresh is how long what one read serves.
const (
	massScrapeTimeout = 5 * time.Second
	massScrapeMax     = 50
	massRefresh       = 5 * time.Second
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
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) >= massRefresh {
		g.read, g.at = g.progressMetrics(), time.Now()
	}
	for _, m := range g.read {
		ch <- m
	}
}

// progressMetrics asks Temporal for the running mass updates' progress.
func (g *massGauges) progressMetrics() []prometheus.Metric {
	var out []prometheus.Metric
	ctx, cancel := context.WithTimeout(context.Background(), massScrapeTimeout)
	defer cancel()
	resp, err := g.s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		PageSize: massScrapeMax,
		Query:    fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Running'", runs.MassUpdateType),
	})
	if err != nil {
		g.s.Logger.Warn("listing the running mass updates for their metrics", "error", err)
		return nil
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
			out = append(out, prometheus.MustNewConstMetric(massInstancesDesc, prometheus.GaugeValue, float64(n), name, state))
		}
		paused := 0.0
		if p.State == massupdate.Paused {
			paused = 1
		}
		out = append(out, prometheus.MustNewConstMetric(massPausedDesc, prometheus.GaugeValue, paused, name))
	}
	return out
}

func (g *massGauges) progress(ctx context.Context, workflowID string) (massupdate.Progress, error) {
	var p massupdate.Progress
	v, err := g.s.Temporal.QueryWorkflow(ctx, workflowID, "", runs.QueryProgress)
	if err != nil {
		return p, err
	}
	return p, v.Get(&p)
}
