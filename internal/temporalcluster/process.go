package temporalcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrKilled is a process that did not stop within its grace period and
// was killed: a stop that lost the process's own shutdown, not the
// process. Matching, for one, holds its long polls (up to a minute) while
// it drains.
var ErrKilled = errors.New("killed after its grace period")

// process is one server process of the cluster: PostgreSQL or one of
// Temporal's services. It can be killed and started again with the same
// command line, as a pod's container is.
type process struct {
	name string
	path string
	args []string
	// user runs the process as another user (PostgreSQL refuses root).
	user *syscall.Credential
	out  io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// start starts the process; it must not be running.
func (p *process) start() error {
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// A test binary or qm that dies must not leave the servers running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.user}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s (%s; run `make tools`): %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// running tells whether the process has been started and not exited.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// pid is the running process's id, 0 if there is none.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// signal sends sig and waits up to grace for the process to exit, then
// kills it. A process that is not running is no error.
func (p *process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return fmt.Errorf("%s did not stop within %s of %s: %w", p.name, grace, sig, ErrKilled)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not exit after SIGKILL", p.name)
	}
}
