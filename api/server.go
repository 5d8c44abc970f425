// Package api serves Quartermaster's HTTP front end: the OSB v2 API for
// platforms and the admin API for operators. It records requests as
// resources and answers from their status; it provisions nothing itself.
package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Server is the HTTP front end.
type Server struct {
	// Kube reads and writes the resources the API is backed by.
	Kube client.Client
	// Catalog serves the registered services and plans.
	Catalog Catalog
	// OSB are the credentials OSB clients must present.
	OSB Credentials
}

// Handler returns the routes: /healthz, and the OSB API under /v2 behind
// basic auth and the X-Broker-API-Version check.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Route("/v2", func(r chi.Router) {
		r.Use(requestIdentity, basicAuth("Quartermaster OSB", s.OSB), brokerAPIVersion)
		r.Get("/catalog", s.getCatalog)
	})
	return r
}

// Serve serves on ln until ctx is done, then drains in-flight requests.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.OSB.Username == "" || s.OSB.Password == "" {
		return errors.New("the OSB API needs a username and a password (--osb-username/--osb-password or QM_OSB_USERNAME/QM_OSB_PASSWORD)")
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving the API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down the API: %w", err)
	}
	return nil
}
