package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/quartermaster/qm/internal/massupdate"
	"github.com/quartermaster/qm/workflows/runs"
)

// MassUpdateRequest is the body of POST /admin/mass-updates; `qm
// mass-update start` sends it.
type MassUpdateRequest struct {
	Name string `json:"name,omitempty"`
	massupdate.Selector
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Canary      int     `json:"canary,omitempty"`
	MaxFailures string  `json:"maxFailures,omitempty"`
	DryRun      bool    `json:"dryRun,omitempty"`
}

// MassUpdateRun is how the admin API shows a run.
type MassUpdateRun struct {
	Name       string    `json:"name"`
	WorkflowID string    `json:"workflow_id"`
	Status     string    `json:"status"`
	StartTime  time.Time `json:"start_time"`
	// StartedBy is who started it: "admin <user>", or the watcher.
	StartedBy string               `json:"started_by,omitempty"`
	Progress  *massupdate.Progress `json:"progress,omitempty"`
}

// MassUpdateList is the reply of GET /admin/mass-updates.
type MassUpdateList struct {
	Runs []MassUpdateRun `json:"mass_updates"`
}

// MassUpdateDryRun is the reply of a dry run: the instances a run would
// update, and how many it would skip as current already.
type MassUpdateDryRun struct {
	DryRun    bool     `json:"dryRun"`
	Total     int      `json:"total"`
	Skipped   int      `json:"skipped"`
	Instances []string `json:"instances"`
}

// MassUpdateStarted is the reply of a start.
type MassUpdateStarted struct {
	Name       string `json:"name"`
	WorkflowID string `json:"workflow_id"`
	URL        string `json:"url"`
}

// runName is what a run may be called: it becomes part of a workflow ID.
var runName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._/-]{0,200}[a-z0-9])?$`)

// massRoutes are the mass update routes of the admin API.
func (s *Server) massRoutes(r chi.Router) {
	r.Post("/mass-updates", s.startMassUpdate)
	r.Get("/mass-updates", s.listMassUpdates)
	r.Get("/mass-updates/*", s.getMassUpdate)
	r.Post("/mass-updates/*", s.steerMassUpdate)
}

// needTemporal answers 503 when the API runs without Temporal.
func (s *Server) needTemporal(w http.ResponseWriter) bool {
	if s.Temporal == nil {
		writeError(w, http.StatusServiceUnavailable, "", "mass updates need Temporal: run qm api with TEMPORAL_ADDRESS (or a temporal.toml profile)")
		return false
	}
	return true
}

// startMassUpdate starts a run, or, with dryRun, lists what it would update.
func (s *Server) startMassUpdate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, s.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "reading the request: "+err.Error())
		return
	}
	var req MassUpdateRequest
	if rerr := decodeJSON(body, &req); rerr != nil {
		writeError(w, http.StatusBadRequest, "", rerr.Error())
		return
	}
	budget, err := massupdate.ParseBudget(req.MaxFailures)
	if err == nil {
		err = req.Selector.Validate()
	}
	if err == nil && (req.Concurrency < 0 || req.Rate < 0 || req.Canary < 0) {
		err = errors.New("concurrency, rate and canary cannot be negative")
	}
	if req.Name == "" {
		req.Name = "manual-" + time.Now().UTC().Format("20060102-150405")
	}
	if err == nil && !runName.MatchString(req.Name) {
		err = fmt.Errorf("name %q: use lower-case letters, digits, '.', '_', '-' and '/'", req.Name)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if req.DryRun {
		sel, err := massupdate.Select(r.Context(), s.Kube, s.Offerings, req.Selector)
		if err != nil {
			s.internalError(w, r, "selecting the instances", err)
			return
		}
		names := make([]string, 0, len(sel.Targets))
		for _, t := range sel.Targets {
			names = append(names, t.String())
		}
		writeJSON(w, http.StatusOK, MassUpdateDryRun{DryRun: true, Total: len(sel.Targets) + sel.Skipped, Skipped: sel.Skipped, Instances: names})
		return
	}
	if !s.needTemporal(w) {
		return
	}
	planID := ""
	if len(req.PlanIDs) > 0 {
		planID = req.PlanIDs[0]
	}
	_, err = s.Temporal.ExecuteWorkflow(r.Context(), runs.MassUpdateOptions(req.Name, planID, "mass update "+req.Name, "admin "+admin(r)),
		runs.MassUpdateType, massupdate.Request{Name: req.Name, Selector: req.Selector, Concurrency: req.Concurrency,
			Rate: req.Rate, Canary: req.Canary, MaxFailures: budget})
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		writeError(w, http.StatusConflict, "", fmt.Sprintf("a mass update named %q exists already; choose another name", req.Name))
		return
	}
	if err != nil {
		s.internalError(w, r, "starting the mass update", err)
		return
	}
	writeJSON(w, http.StatusAccepted, MassUpdateStarted{Name: req.Name, WorkflowID: runs.MassUpdateID(req.Name), URL: "/admin/mass-updates/" + req.Name})
}

// listMassUpdates lists the runs, newest first.
func (s *Server) listMassUpdates(w http.ResponseWriter, r *http.Request) {
	if !s.needTemporal(w) {
		return
	}
	resp, err := s.Temporal.ListWorkflow(r.Context(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = %q", runs.MassUpdateType),
	})
	if err != nil {
		s.internalError(w, r, "listing the mass updates", err)
		return
	}
	out := MassUpdateList{Runs: []MassUpdateRun{}}
	for _, e := range resp.GetExecutions() {
		id := e.GetExecution().GetWorkflowId()
		out.Runs = append(out.Runs, MassUpdateRun{Name: strings.TrimPrefix(id, runs.MassUpdateID("")), WorkflowID: id,
			Status: runStatus(e.GetStatus()), StartTime: e.GetStartTime().AsTime()})
	}
	writeJSON(w, http.StatusOK, out)
}

// getMassUpdate shows one run with its progress.
func (s *Server) getMassUpdate(w http.ResponseWriter, r *http.Request) {
	if !s.needTemporal(w) {
		return
	}
	name := chi.URLParam(r, "*")
	run, ok := s.describeRun(w, r, name)
	if !ok {
		return
	}
	v, err := s.Temporal.QueryWorkflow(r.Context(), run.WorkflowID, "", runs.QueryProgress)
	if err == nil {
		var p massupdate.Progress
		if err = v.Get(&p); err == nil {
			run.Progress = &p
		}
	}
	if err != nil && run.Status == "completed" {
		var p massupdate.Progress
		if err = s.Temporal.GetWorkflow(r.Context(), run.WorkflowID, "").Get(r.Context(), &p); err == nil {
			run.Progress = &p
		}
	}
	if err != nil {
		s.internalError(w, r, "asking mass update "+name+" for its progress", err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// describeRun finds a run by name, answering 404 when there is none.
func (s *Server) describeRun(w http.ResponseWriter, r *http.Request, name string) (MassUpdateRun, bool) {
	id := runs.MassUpdateID(name)
	d, err := s.Temporal.DescribeWorkflowExecution(r.Context(), id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("there is no mass update named %q", name))
		return MassUpdateRun{}, false
	}
	if err != nil {
		s.internalError(w, r, "reading mass update "+name, err)
		return MassUpdateRun{}, false
	}
	info := d.GetWorkflowExecutionInfo()
	var by string
	if p := info.GetMemo().GetFields()[runs.MemoStartedBy]; p != nil {
		// A run started before the memo was written has none.
		_ = converter.GetDefaultDataConverter().FromPayload(p, &by)
	}
	return MassUpdateRun{Name: name, WorkflowID: id, StartTime: info.GetStartTime().AsTime(),
		Status: runStatus(info.GetStatus()), StartedBy: by}, true
}

// runStatus is a run's status as the admin API shows it: "running",
// "completed", "failed", ...
func runStatus(s enums.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// steerMassUpdate pauses, resumes or cancels a run, or sets its
// concurrency: POST /admin/mass-updates/<name>/<action>.
func (s *Server) steerMassUpdate(w http.ResponseWriter, r *http.Request) {
	if !s.needTemporal(w) {
		return
	}
	path := chi.URLParam(r, "*")
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		writeError(w, http.StatusNotFound, "", "POST /admin/mass-updates/<name>/pause, resume, cancel or concurrency")
		return
	}
	name, action := path[:i], path[i+1:]
	steer := massupdate.Steer{Action: action, By: "admin " + admin(r)}
	switch action {
	case massupdate.Pause, massupdate.Resume, massupdate.Cancel:
	case massupdate.SetConcurrency:
		body, _ := io.ReadAll(io.LimitReader(r.Body, s.MaxBodyBytes))
		if err := json.Unmarshal(body, &steer); err != nil || steer.Concurrency < 1 {
			writeError(w, http.StatusBadRequest, "", `give the new concurrency as {"concurrency": 20}`)
			return
		}
		steer.Action, steer.By = action, "admin "+admin(r)
	default:
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("unknown action %q: pause, resume, cancel or concurrency", action))
		return
	}
	run, ok := s.describeRun(w, r, name)
	if !ok {
		return
	}
	if run.Status != "running" {
		writeError(w, http.StatusConflict, "", fmt.Sprintf("mass update %s is %s", name, run.Status))
		return
	}
	if err := s.Temporal.SignalWorkflow(r.Context(), run.WorkflowID, "", runs.SignalSteer, steer); err != nil {
		s.internalError(w, r, "steering mass update "+name, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"name": name, "action": action})
}
