package devenv

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/quartermaster/qm/internal/childproc"
	"github.com/quartermaster/qm/internal/devserver"
)

// The supervisor's pace: how often it looks at its children, and how often
// and how late it tries to bring the dev server back.
const (
	superviseEvery = 500 * time.Millisecond
	restartTries   = 5
	firstBackoff   = time.Second
)

// supervisor watches the servers qm dev started as processes: the dev
// server is restarted on the same data when it dies (its clients reconnect
// by themselves); etcd and kube-apiserver cannot be restarted under
// envtest, so their death ends qm dev with an error naming them.
type supervisor struct {
	o        Options
	temporal devserver.Options
	srv      *devserver.Server
}

// run returns when ctx is done (nil), or with the error that ends qm dev.
func (s *supervisor) run(ctx context.Context) error {
	kubePids := filepath.Join(s.o.DataDir, "cluster", "pids")
	ticker := time.NewTicker(superviseEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if s.o.Kubeconfig == "" {
			for _, name := range []string{"etcd", "kube-apiserver"} {
				if pid, ok := childproc.Running(filepath.Join(kubePids, name+".pid")); !ok {
					return fmt.Errorf("%s (pid %d) died; qm dev cannot restart it: see %s and start qm dev again",
						name, pid, filepath.Join(s.o.DataDir, "logs"))
				}
			}
		}
		if s.srv == nil {
			continue
		}
		if pid, ok := childproc.Running(filepath.Join(s.temporal.RunDir, "pids", "temporal.pid")); !ok {
			// Ctrl-C interrupts the whole process group: that is a stop, not a death.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(superviseEvery):
			}
			fmt.Fprintf(s.o.Out, "\nThe Temporal dev server (pid %d) died; restarting it on %s...\n", pid, s.temporal.DBFile)
			if err := s.restartTemporal(ctx); err != nil {
				return err
			}
		}
	}
}

// restartTemporal starts the dev server again on the same data and
// address, with backoff, or says why it could not.
func (s *supervisor) restartTemporal(ctx context.Context) error {
	_ = s.srv.Stop() // reaps the dead process; it has nothing left to stop
	backoff := firstBackoff
	var err error
	for try := 1; try <= restartTries; try++ {
		var srv *devserver.Server
		if srv, err = devserver.Start(ctx, s.temporal); err == nil {
			srv.Client().Close() // qm's own client reconnects to the same address
			s.srv = srv
			fmt.Fprintf(s.o.Out, "The Temporal dev server is back at %s (try %d); operations carry on.\n", s.temporal.Address, try)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintf(s.o.Out, "Restarting the Temporal dev server failed (try %d of %d, next in %s): %v\n", try, restartTries, backoff, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return fmt.Errorf("the Temporal dev server died and could not be restarted after %d tries: %w", restartTries, err)
}
