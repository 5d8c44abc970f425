package temporalcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nobody is the user PostgreSQL runs as when the cluster is started by
// root: the server refuses to run as root.
const nobody = 65534

// The database user and the databases of the default store and of SQL
// visibility. Trust authentication on loopback: the password is not checked.
const (
	dbUser           = "temporal"
	dbPassword       = "temporal"
	dbDefault        = "temporal"
	dbVisibility     = "temporal_visibility"
	postgresReadyKey = "ready"
)

// postgres is PostgreSQL on a loopback port, its data in dir.
type postgres struct {
	*process
	dir  string
	port int
}

// startPostgres creates a database cluster in dir (initdb) and starts
// PostgreSQL on port. binDir holds the server's bin/ (initdb, postgres).
func startPostgres(ctx context.Context, binDir, dir string, port int, out io.Writer) (*postgres, error) {
	var user *syscall.Credential
	if os.Geteuid() == 0 {
		user = &syscall.Credential{Uid: nobody, Gid: nobody}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			return nil, fmt.Errorf("giving %s to PostgreSQL's user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", data, "-U", dbUser, "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	if raw, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb %s (run `make tools`): %w: %s", data, err, tail(raw))
	}
	pg := &postgres{dir: dir, port: port, process: &process{
		name: "postgres",
		path: filepath.Join(binDir, "postgres"),
		// Durability is traded for speed as a test machine may: without
		// fsync a crash of the machine could lose commits, a crash or
		// restart of the server loses none. No Unix socket: clients use TCP.
		args: []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=", "-c", "max_connections=300",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"},
		user: user,
		out:  out,
	}}
	if err := pg.restart(ctx, 0); err != nil {
		return nil, err
	}
	return pg, nil
}

// restart stops PostgreSQL, if it runs, with a fast shutdown (SIGINT:
// sessions are cut, transactions roll back), waits down, and starts it
// again; it returns when the server accepts connections.
func (pg *postgres) restart(ctx context.Context, down time.Duration) error {
	if pg.running() {
		if err := pg.signal(syscall.SIGINT, 30*time.Second); err != nil {
			return err
		}
	}
	time.Sleep(down)
	if err := pg.start(); err != nil {
		return err
	}
	return pg.waitReady(ctx)
}

// waitReady waits until the postmaster says it is ready, as pg_ctl -w
// does: the last line of postmaster.pid turns "ready".
func (pg *postgres) waitReady(ctx context.Context) error {
	pidFile := filepath.Join(pg.dir, "data", "postmaster.pid")
	for {
		if raw, err := os.ReadFile(pidFile); err == nil {
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			if len(lines) >= 8 && strings.TrimSpace(lines[7]) == postgresReadyKey && strings.TrimSpace(lines[0]) == strconv.Itoa(pg.pid()) {
				return nil
			}
		}
		if !pg.running() {
			return fmt.Errorf("PostgreSQL exited at start (its output is in the cluster's log)")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for PostgreSQL to accept connections: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setupSchemas creates the default store's and visibility's databases and
// brings their schemas to the versions the server needs, with the server's
// own schema tool, as an operator installs a cluster.
func setupSchemas(ctx context.Context, sqlTool string, port int) error {
	for _, db := range []struct{ name, schema string }{
		{dbDefault, "postgresql/v12/temporal"},
		{dbVisibility, "postgresql/v12/visibility"},
	} {
		base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(port),
			"-u", dbUser, "--pw", dbPassword, "--db", db.name}
		for _, step := range [][]string{
			{"create-database"},
			{"setup-schema", "-v", "0.0"},
			{"update-schema", "--schema-name", db.schema},
		} {
			cmd := exec.CommandContext(ctx, sqlTool, append(base, step...)...)
			if raw, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s %s on %s: %w: %s", filepath.Base(sqlTool), step[0], db.name, err, tail(raw))
			}
		}
	}
	return nil
}

// tail is the end of a command's output, for an error message.
func tail(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return string(raw)
}
