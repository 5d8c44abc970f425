package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminClient calls the admin API's mass updates from Go: what `qm
// mass-update` uses, and any other program may.
type AdminClient struct {
	// URL is where the API serves, such as http://127.0.0.1:8080.
	URL         string
	Credentials Credentials
	// HTTP sends the requests (nil: a client with a minute's timeout).
	HTTP *http.Client
}

// AdminError is a reply of the admin API other than 2xx.
type AdminError struct {
	Method, Path string
	// Status is the reply's status line ("409 Conflict"), StatusCode its code.
	Status      string
	StatusCode  int
	Description string
}

func (e *AdminError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Description)
}

// DryRun lists what a mass update of req would update, changing nothing.
func (c *AdminClient) DryRun(ctx context.Context, req MassUpdateRequest) (MassUpdateDryRun, error) {
	req.DryRun = true
	var out MassUpdateDryRun
	return out, c.do(ctx, http.MethodPost, "/admin/mass-updates", req, &out)
}

// StartMassUpdate starts a mass update.
func (c *AdminClient) StartMassUpdate(ctx context.Context, req MassUpdateRequest) (MassUpdateStarted, error) {
	req.DryRun = false
	var out MassUpdateStarted
	return out, c.do(ctx, http.MethodPost, "/admin/mass-updates", req, &out)
}

// MassUpdates lists the runs, newest first.
func (c *AdminClient) MassUpdates(ctx context.Context) ([]MassUpdateRun, error) {
	var out MassUpdateList
	return out.Runs, c.do(ctx, http.MethodGet, "/admin/mass-updates", nil, &out)
}

// MassUpdate reads one run with its progress.
func (c *AdminClient) MassUpdate(ctx context.Context, name string) (MassUpdateRun, error) {
	var out MassUpdateRun
	if err := c.do(ctx, http.MethodGet, "/admin/mass-updates/"+name, nil, &out); err != nil {
		return out, err
	}
	if out.Progress == nil {
		return out, fmt.Errorf("mass update %s (%s) reported no progress", name, out.Status)
	}
	return out, nil
}

// SteerMassUpdate pauses, resumes or cancels a run (massupdate.Pause, ...).
func (c *AdminClient) SteerMassUpdate(ctx context.Context, name, action string) error {
	return c.do(ctx, http.MethodPost, "/admin/mass-updates/"+name+"/"+action, nil, nil)
}

// do sends a request and decodes a 2xx reply into out; any other reply is
// an *AdminError with the API's description.
func (c *AdminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+path, body)
	if err != nil {
		return err
	}
	req.SetBasicAuth(c.Credentials.Username, c.Credentials.Password)
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the admin API at %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the admin API's reply to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e osbError
		_ = json.Unmarshal(raw, &e)
		return &AdminError{Method: method, Path: path, Status: resp.Status, StatusCode: resp.StatusCode, Description: cmp.Or(e.Description, string(raw))}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
