package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	temporalclient "go.temporal.io/sdk/client"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/clusters"
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

	params  parameters.Checker
	metrics *metrics
	once    sync.Once
}

// Handler returns the routes: /healthz, /metrics, the OSB API under /v2
// behind basic auth and the X-Broker-API-Version check, and the admin API
// under /admin behind its own credentials.
func (s *Server) Handler() http.Handler {
	s.once.Do(s.defaults)
	r := chi.NewRouter()
	// observe is outside Recoverer, so that a request that panicked is
	// logged and counted with the 500 that Recoverer answers.
	r.Use(s.observe, middleware.Recoverer)
	// Unknown routes and methods get the spec's JSON error body too; chi
	// passes these handlers on to the routers below.
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
	r.Handle("/metrics", s.metrics.handler())
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

// Serve serves on ln until ctx is done, then drains in-flight requests.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.OSB.Username == "" || s.OSB.Password == "" {
		return errors.New("the OSB API needs a username and a password (--osb-username/--osb-password or QM_OSB_USERNAME/QM_OSB_PASSWORD)")
	}
	handler := s.Handler()
	srv := &http.Server{
		Handler: handler,
		// Failed handshakes and the like go to the API's log, not stderr.
		ErrorLog:          slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are at most MaxBodyBytes: a client that trickles one is
		// cut off rather than holding a connection. Replies may wait up to
		// SyncTimeout for a workflow, so there is no write timeout.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
	}
	serve := func() error { return srv.Serve(ln) }
	if s.TLS != nil {
		cfg, err := s.TLS.config()
		if err != nil {
			return err
		}
		srv.TLSConfig = cfg
		serve = func() error { return srv.ServeTLS(ln, "", "") }
	}
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving the API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// The requests in flight finish: a provision may wait for its
	// operation up to the sync timeout, then answers.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout())
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down the API: %w", err)
	}
	return nil
}
