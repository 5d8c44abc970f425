package api

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	temporalclient "go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/clusters"
	"github.com/quartermaster/qm/internal/limits"
	"github.com/quartermaster/qm/internal/parameters"
)

// Defaults of the Server's tunables.
const (
	DefaultSyncTimeout = 60 * time.Second
	DefaultBindTimeout = 30 * time.Second
)

// Server is the HTTP front end.
type Server struct {
	// Kube reads and writes the resources the API is backed by.
	Kube client.Client
	// Clusters reaches the clusters instances are scheduled on, where their
	// bindings' credentials are (nil: only Kube's).
	Clusters *clusters.Clients
	// Offerings are the registered services and plans.
	Offerings Offerings
	// Namespace holds the SFServiceInstances and SFServiceBindings that OSB
	// requests create.
	Namespace string
	// OSB are the credentials OSB clients must present.
	OSB Credentials
	// Admin are the credentials of the admin API; empty turns it off.
	Admin Credentials
	// SyncTimeout is how long a provision, update or deprovision of a plan
	// without manager.async may take before the reply; beyond it the broker
	// answers 202 when the client accepts incomplete operations.
	SyncTimeout time.Duration
	// BindTimeout is the same for bind and unbind of a plan without
	// manager.asyncBinding.
	BindTimeout time.Duration
	// MaxBodyBytes bounds request bodies (413 beyond).
	MaxBodyBytes int64
	// Logger logs one line per request; nil logs to slog.Default().
	Logger *slog.Logger
	// TLS, when set, serves HTTPS; otherwise the API serves plain HTTP.
	TLS *TLS
	// Cache, when set, is an informer cache of the namespace's
	// SFServiceInstances and SFServiceBindings, from which last_operation
	// polls are answered when that is safe (see polls.go).
	Cache client.Reader
	// Temporal, when set, serves the mass updates of the admin API
	// (otherwise they answer 503).
	Temporal temporalclient.Client
	// Limits bound the provisions of each organization.
	Limits Limits

	limitLocks limits.Locks

	params  parameters.Checker
	metrics *metrics
	once    sync.Once
}

// Listeners are where Serve serves each part of the API.
type Listeners struct {
	// OSB serves the OSB API under /v2, and /healthz. Required.
	OSB net.Listener
	// Admin serves the admin API under /admin, and /healthz, over HTTPS
	// when the OSB API is: on a port of its own, so that what reaches the
	// OSB port (platforms, the network they are on) never reaches it. Nil,
	// or a Server without admin credentials: no admin API.
	Admin net.Listener
	// Metrics serves /metrics, in plain HTTP as the watcher's and the
	// worker's: what a scrape reads is no platform's business. Nil: none.
	Metrics net.Listener
}

// served is one listener of Serve's and what it serves.
type served struct {
	name    string
	ln      net.Listener
	handler http.Handler
	tls     *tls.Config
}

// Handler returns the OSB API's routes: /healthz, and the OSB API under
// /v2 behind basic auth and the X-Broker-API-Version check.
func (s *Server) Handler() http.Handler {
	s.once.Do(s.defaults)
	r := s.router()
	r.Route("/v2", func(r chi.Router) {
		r.Use(requestIdentity, certOrBasicAuth("Quartermaster OSB", s.OSB), brokerAPIVersion)
		r.Get("/catalog", s.getCatalog)
		r.Route("/service_instances/{instance_id}", func(r chi.Router) {
			r.Use(canonicalID("instance_id"))
			r.Put("/", s.osb(s.putInstance))
			r.Patch("/", s.osb(s.patchInstance))
			r.Delete("/", s.osb(s.deleteInstance))
			r.Get("/", s.osb(s.getInstance))
			r.Get("/last_operation", s.osb(s.instanceLastOperation))
			r.Route("/service_bindings/{binding_id}", func(r chi.Router) {
				r.Use(canonicalID("binding_id"))
				r.Put("/", s.osb(s.putBinding))
				r.Delete("/", s.osb(s.deleteBinding))
				r.Get("/", s.osb(s.getBinding))
				r.Get("/last_operation", s.osb(s.bindingLastOperation))
			})
		})
	})
	return r
}

// AdminHandler returns the admin API's routes: /healthz, and the admin API
// under /admin behind its own credentials.
func (s *Server) AdminHandler() http.Handler {
	s.once.Do(s.defaults)
	r := s.router()
	r.Route("/admin", func(r chi.Router) {
		r.Use(requestIdentity, s.adminEnabled, basicAuth("Quartermaster admin", s.Admin), jsonOnly)
		r.Get("/instances", s.adminListInstances)
		r.Get("/instances/{namespace}/{name}", s.adminGetInstance)
		r.Get("/usagekinds", s.adminListUsageKinds)
		r.Get("/usagekinds/{name}/resources", s.adminListUsageTargets)
		s.massRoutes(r)
	})
	return r
}

// MetricsHandler serves /metrics: the requests of both APIs and the
// running mass updates' progress.
func (s *Server) MetricsHandler() http.Handler {
	s.once.Do(s.defaults)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.handler())
	return mux
}

// router is what both APIs' routers share: every request logged and
// counted, a panic answered with 500, unknown routes and methods answered
// with a JSON error body too, and /healthz for the probes.
func (s *Server) router() chi.Router {
	r := chi.NewRouter()
	// observe is outside Recoverer, so that a request that panicked is
	// logged and counted with the 500 that Recoverer answers.
	r.Use(s.observe, middleware.Recoverer)
	// chi passes these handlers on to the routers below.
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no route %s", r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return r
}

func (s *Server) defaults() {
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	if s.SyncTimeout == 0 {
		s.SyncTimeout = DefaultSyncTimeout
	}
	if s.BindTimeout == 0 {
		s.BindTimeout = DefaultBindTimeout
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.metrics = newMetrics()
	s.metrics.gatherer.MustRegister(&massGauges{s: s})
}

// DrainTimeout is how long Serve lets the requests in flight finish once
// its context is done: the longest a request may wait for its operation,
// and 5 s more. The chart's terminationGracePeriodSeconds is larger.
func (s *Server) DrainTimeout() time.Duration {
	return max(cmp.Or(s.SyncTimeout, DefaultSyncTimeout), cmp.Or(s.BindTimeout, DefaultBindTimeout)) + 5*time.Second
}

// AdminEnabled says whether the admin API is served: it has credentials.
func (s *Server) AdminEnabled() bool { return s.Admin.Username != "" && s.Admin.Password != "" }

// Serve serves on ls until ctx is done, then drains in-flight requests.
func (s *Server) Serve(ctx context.Context, ls Listeners) error {
	if s.OSB.Username == "" || s.OSB.Password == "" {
		return errors.New("the OSB API needs a username and a password (--osb-username/--osb-password or QM_OSB_USERNAME/QM_OSB_PASSWORD)")
	}
	var tlsConfig *tls.Config
	if s.TLS != nil {
		cfg, err := s.TLS.config()
		if err != nil {
			return err
		}
		tlsConfig = cfg
	}
	parts := []served{{"the OSB API", ls.OSB, s.Handler(), tlsConfig}}
	switch {
	case ls.Admin != nil && s.AdminEnabled():
		parts = append(parts, served{"the admin API", ls.Admin, s.AdminHandler(), tlsConfig})
	case ls.Admin != nil:
		// No credentials, no admin API: its port is let go, not left open
		// with nothing answering.
		_ = ls.Admin.Close()
	}
	if ls.Metrics != nil {
		parts = append(parts, served{"the API's metrics", ls.Metrics, s.MetricsHandler(), nil})
	}
	servers := make([]*http.Server, len(parts))
	errc := make(chan error, len(parts))
	for i, p := range parts {
		srv := &http.Server{
			Handler: p.handler,
			// Failed handshakes and the like go to the API's log, not stderr.
			ErrorLog:          slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn),
			ReadHeaderTimeout: 10 * time.Second,
			// Bodies are at most MaxBodyBytes: a client that trickles one is
			// cut off rather than holding a connection. Replies may wait up to
			// SyncTimeout for a workflow, so there is no write timeout.
			ReadTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute,
			// A copy each: a server adds its HTTP/2 settings to its own.
			TLSConfig: p.tls.Clone(),
		}
		servers[i] = srv
		go func() {
			var err error
			if p.tls != nil {
				err = srv.ServeTLS(p.ln, "", "")
			} else {
				err = srv.Serve(p.ln)
			}
			errc <- fmt.Errorf("serving %s on %s: %w", p.name, p.ln.Addr(), err)
		}()
	}
	var failed error
	select {
	case failed = <-errc:
	case <-ctx.Done():
	}
	// The requests in flight finish: a provision may wait for its
	// operation up to the sync timeout, then answers.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout())
	defer cancel()
	var g errgroup.Group
	for _, srv := range servers {
		g.Go(func() error {
			if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("shutting down the API: %w", err)
			}
			return nil
		})
	}
	return errors.Join(failed, g.Wait())
}
