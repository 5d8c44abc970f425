package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// osbError is the OSB error response body.
type osbError struct {
	Error       string `json:"error,omitempty"`
	Description string `json:"description,omitempty"`
}

// writeError writes an OSB error body; code is the spec's error code
// (AsyncRequired, ConcurrencyError, ...) or empty.
func writeError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, osbError{Error: code, Description: description})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// osbHandler is an OSB route: it answers the request itself, or returns
// the refusal for refuse to write.
type osbHandler func(w http.ResponseWriter, r *http.Request) *requestError

// osb adapts an osbHandler to chi's http.HandlerFunc: a handler that
// refuses says so by returning, and the refusal is written in one place.
func (s *Server) osb(h osbHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e := h(w, r); e != nil {
			s.refuse(w, r, e)
		}
	}
}

// refuse writes the OSB error body of a refused request. A failure of the
// broker itself (5xx) is logged too.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *requestError) {
	if e.cause != nil {
		s.internalError(w, r, e.description, e.cause)
		return
	}
	if e.status >= 500 {
		s.Logger.Error("request failed", "status", e.status, "description", e.description)
	}
	if e.status == http.StatusGone && e.description == "" {
		writeJSON(w, e.status, struct{}{})
		return
	}
	writeError(w, e.status, e.code, e.description)
}

// internalError answers 500 for a failure of the broker itself, and logs
// it. The answer names the step and the request's identity, not the cause:
// the cause is what the API server or Temporal said, which is the
// operator's to read in the log, under that identity, not any client's.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, doing string, err error) {
	id := r.Header.Get(requestIdentityHeader)
	s.Logger.ErrorContext(r.Context(), doing+" failed", "error", err, "requestIdentity", id)
	writeError(w, http.StatusInternalServerError, "", fmt.Sprintf("%s failed: an internal error; the broker's log has its cause under request identity %s", doing, id))
}
