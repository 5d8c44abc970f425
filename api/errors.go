package api

import (
	"encoding/json"
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
