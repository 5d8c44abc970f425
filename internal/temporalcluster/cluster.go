// Package temporalcluster runs Temporal as production runs it, on one
// machine: PostgreSQL as the default store and as SQL visibility, its
// schemas set up by the server's schema tool, and temporal-server's
// history, matching, frontend and worker services each in a process of
// its own, with several history shards and partitioned task queues. The
// binaries are built by `make tools` (bin/temporal-server,
// bin/temporal-sql-tool, bin/postgres/). Tests run Quartermaster on it
// beside the dev server (internal/devserver); faults kill one service, or
// restart the database, while the rest keeps running.
package temporalcluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quartermaster/qm/internal/freeport"
)

// Options configure a cluster.
type Options struct {
	// BinDir holds temporal-server, temporal-sql-tool and postgres/bin.
	BinDir string
	// HistoryShards is fixed when the cluster is created (default 4).
	HistoryShards int
	// Partitions is the read and write partitions of every task queue
	// (default 4, production's default).
	Partitions int
	// Namespace is registered at start (default "default").
	Namespace string
	// DynamicConfig sets more of the server's dynamic config values.
	DynamicConfig map[string]any
	// Logger is used by the returned client; nil uses slog's default.
	Logger *slog.Logger
}

// Cluster is a running cluster. Its files (configuration, the database,
// each process's log) live in Dir until Stop.
type Cluster struct {
	Dir       string
	namespace string
	pg        *postgres
	services  map[string]*process
	ports     map[string]ports
	client    client.Client
	logger    *slog.Logger
}

// healthNames are the gRPC health-check service names the services set
// SERVING once they can take requests; Temporal's worker service has none.
var healthNames = map[string]string{
	"frontend": "temporal.api.workflowservice.v1.WorkflowService",
	"history":  "temporal.api.workflowservice.v1.HistoryService",
	"matching": "temporal.api.workflowservice.v1.MatchingService",
}

// startTries bounds how often Start picks new ports because one it picked
// was taken before the service given it bound it.
const startTries = 3

// errPortTaken is the error of a start that failed because a port picked
// for the cluster was taken in the meantime: freeport's ports are free
// when picked, and another process on the machine (another test's server
// picking from the same range) may bind one first.
var errPortTaken = errors.New("a port picked for it was taken before it bound it")

// Start creates and starts a cluster and returns once its namespace is
// registered and the frontend serves it. Whatever it started is stopped
// again if it fails; a start that lost a port to another process is made
// again on new ports.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for try := 1; ; try++ {
		c, err := start(ctx, opts, try == startTries)
		if err == nil || try == startTries || !errors.Is(err, errPortTaken) {
			return c, err
		}
		cmp.Or(opts.Logger, slog.Default()).Info("starting the Temporal cluster again on new ports", "error", err)
	}
}

// start is one attempt of Start's. A failed attempt leaves its logs for
// the error to point at, except one that lost a port and is not the last:
// the next attempt's are the ones to read.
func start(ctx context.Context, opts Options, last bool) (_ *Cluster, err error) {
	opts.HistoryShards = cmp.Or(opts.HistoryShards, 4)
	opts.Partitions = cmp.Or(opts.Partitions, 4)
	opts.Namespace = cmp.Or(opts.Namespace, "default")
	c := &Cluster{namespace: opts.Namespace, services: map[string]*process{}, ports: map[string]ports{}, logger: cmp.Or(opts.Logger, slog.Default())}
	if c.Dir, err = os.MkdirTemp("", "qm-temporal-cluster-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			retried := !last && errors.Is(err, errPortTaken)
			if !retried {
				err = fmt.Errorf("%w (logs in %s)", err, filepath.Join(c.Dir, "logs"))
			}
			c.stop(retried)
		}
	}()
	// PostgreSQL may run as another user, which must reach its directory.
	if err := os.Chmod(c.Dir, 0o711); err != nil {
		return nil, err
	}
	for _, d := range []string{"logs", "postgres"} {
		if err := os.Mkdir(filepath.Join(c.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	// Below the ephemeral range: Temporal's SQL schema keeps a member's
	// membership port in a smallint, which a port the kernel picks does not fit.
	free, err := freeport.Loopback(1 + 2*len(Services) + 1)
	if err != nil {
		return nil, err
	}
	for i, name := range Services {
		c.ports[name] = ports{GRPC: free[1+2*i], Membership: free[2+2*i]}
	}
	fp := c.ports["frontend"]
	fp.HTTP = free[len(free)-1]
	c.ports["frontend"] = fp

	pgLog, err := c.logFile("postgres")
	if err != nil {
		return nil, err
	}
	if c.pg, err = startPostgres(ctx, filepath.Join(opts.BinDir, "postgres", "bin"), filepath.Join(c.Dir, "postgres"), free[0], pgLog); err != nil {
		if c.lostPort("postgres") {
			return nil, fmt.Errorf("%w: %w", err, errPortTaken)
		}
		return nil, err
	}
	if err := setupSchemas(ctx, filepath.Join(opts.BinDir, "temporal-sql-tool"), c.pg.port); err != nil {
		return nil, err
	}
	dc, err := writeYAML(c.Dir, "dynamicconfig.yaml", dynamicConfig(opts.Partitions, opts.DynamicConfig))
	if err != nil {
		return nil, err
	}
	cfg, err := writeYAML(c.Dir, "config.yaml", serverConfig(c.pg.port, opts.HistoryShards, c.ports, dc))
	if err != nil {
		return nil, err
	}
	for _, name := range Services {
		out, err := c.logFile(name)
		if err != nil {
			return nil, err
		}
		c.services[name] = &process{name: "temporal " + name, path: filepath.Join(opts.BinDir, "temporal-server"), out: out,
			args: []string{"--config-file", cfg, "--allow-no-auth", "start", "--service", name}}
		// One at a time: the first writes the cluster's metadata, and a
		// service that starts beside it, finding the record half made,
		// exits (as a pod would crash once and be restarted).
		if err := c.services[name].start(); err != nil {
			return nil, err
		}
		if err := c.waitServing(ctx, name); err != nil {
			return nil, err
		}
	}
	if c.client, err = client.DialContext(ctx, client.Options{HostPort: c.FrontendHostPort(), Namespace: c.namespace,
		Logger: log.NewStructuredLogger(c.logger)}); err != nil {
		return nil, fmt.Errorf("connecting to the cluster's frontend: %w", err)
	}
	if err := c.registerNamespace(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// FrontendHostPort is where clients connect.
func (c *Cluster) FrontendHostPort() string {
	return "127.0.0.1:" + strconv.Itoa(c.ports["frontend"].GRPC)
}

// Client is a client of the cluster's namespace.
func (c *Cluster) Client() client.Client { return c.client }

// Kill kills a service's process (SIGKILL) and starts it again after
// down, as a node's failure and a restarted pod would; it returns once the
// service serves again.
func (c *Cluster) Kill(ctx context.Context, service string, down time.Duration) error {
	p, ok := c.services[service]
	if !ok {
		return fmt.Errorf("no Temporal service %q (have %v)", service, Services)
	}
	if err := p.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		return err
	}
	time.Sleep(down)
	if err := p.start(); err != nil {
		return err
	}
	return c.waitServing(ctx, service)
}

// RestartPostgres restarts the database under the running services: a
// fast shutdown, down without it, then up again.
func (c *Cluster) RestartPostgres(ctx context.Context, down time.Duration) error {
	return c.pg.restart(ctx, down)
}

// Stop stops the services, then the database, and removes Dir.
func (c *Cluster) Stop() error {
	return c.stop(true)
}

// OnlyKilled reports whether each of the errors Stop returned is a
// process killed after its grace period (ErrKilled): the cluster is gone,
// only not gracefully.
func OnlyKilled(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !OnlyKilled(e) {
				return false
			}
		}
		return len(joined.Unwrap()) > 0
	}
	return errors.Is(err, ErrKilled)
}

func (c *Cluster) stop(remove bool) error {
	if c.client != nil {
		c.client.Close()
	}
	var errs []error
	for _, name := range slices.Backward(Services) {
		if p := c.services[name]; p != nil {
			errs = append(errs, p.signal(syscall.SIGTERM, 20*time.Second))
		}
	}
	if c.pg != nil {
		errs = append(errs, c.pg.signal(syscall.SIGINT, 20*time.Second))
	}
	if remove {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// logFile opens the log of one process in Dir/logs.
func (c *Cluster) logFile(name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(c.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// waitServing waits until a service's process answers its gRPC health
// check with SERVING (Temporal's worker service: until it is running).
func (c *Cluster) waitServing(ctx context.Context, service string) error {
	p := c.services[service]
	health, ok := healthNames[service]
	if !ok {
		if !p.running() {
			return c.exitedAtStart(service)
		}
		return nil
	}
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(c.ports[service].GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for {
		if !p.running() {
			return c.exitedAtStart(service)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: health})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for temporal %s to serve (last: %v): %w", service, cmp.Or(err, error(fmt.Errorf("%s", resp.GetStatus()))), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LoseNamespace deletes the cluster's namespace, with every run in it, its
// history and its search attributes, and registers it again, empty: what
// an operator's recreated namespace, or one restored from nothing, is.
func (c *Cluster) LoseNamespace(ctx context.Context) error {
	if _, err := c.client.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{Namespace: c.namespace}); err != nil {
		return fmt.Errorf("deleting namespace %q: %w", c.namespace, err)
	}
	// The deleted namespace is renamed at once, and its runs deleted in
	// the background; the name is free once it no longer describes.
	for {
		_, err := c.client.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: c.namespace})
		var gone *serviceerror.NamespaceNotFound
		if errors.As(err, &gone) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for namespace %q to go: %w", c.namespace, cmp.Or(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return c.registerNamespace(ctx)
}

// registerNamespace registers the cluster's namespace, with a day's
// retention, and waits until the frontend serves it: a cluster knows no
// namespace of users when it is created.
func (c *Cluster) registerNamespace(ctx context.Context) error {
	ns := c.client.WorkflowService()
	for {
		_, err := ns.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: c.namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registering namespace %q: %w", c.namespace, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		resp, err := ns.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: c.namespace})
		if err == nil && resp.GetNamespaceInfo().GetState() == enumspb.NAMESPACE_STATE_REGISTERED {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for namespace %q: %w", c.namespace, cmp.Or(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exitedAtStart is the error of a service that exited as it started:
// errPortTaken when its log says a port it was given was in use.
func (c *Cluster) exitedAtStart(service string) error {
	if c.lostPort(service) {
		return fmt.Errorf("temporal %s exited at start: %w", service, errPortTaken)
	}
	return fmt.Errorf("temporal %s exited at start", service)
}

// lostPort says whether the log of a process the cluster started (a
// Temporal service, or postgres) says a port it was given was in use, in
// the words of Go's net package and PostgreSQL's alike.
func (c *Cluster) lostPort(name string) bool {
	log, err := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	return err == nil && bytes.Contains(bytes.ToLower(log), []byte("address already in use"))
}
