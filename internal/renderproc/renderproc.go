// Package renderproc renders plan templates in processes of their own, so
// that a template cannot escape its bounds: a render that runs past its
// time is killed with its process, and a process whose heap passes its
// bound stops itself, where in the worker's process the render would run
// on, or take the worker down with it. Each process renders one job at a
// time; a Pool keeps a few and starts another for one that was stopped.
//
// The render process is the worker's own executable, started with
// childEnv set: this package's init serves jobs on stdin and stdout and
// exits, before the program's main (or a test binary's TestMain) runs. A
// binary that links this package can therefore always be its own render
// process.
package renderproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/quartermaster/qm/internal/plan"
)

// childEnv marks a render process.
const childEnv = "QM_RENDER_PROCESS"

// Exit codes of a render process that stopped itself.
const (
	exitMemory = 3
)

// heapFactor is how far a render process's heap may grow past a render's
// --render-max-memory (which counts what a template's functions make)
// before the process stops: room for the values, the parsed template and
// the garbage collector.
const heapFactor = 4

// DefaultSizePerCPU is a Pool's processes per CPU. More than one: a render
// mostly waits on nothing, and a plan whose renders each run to their
// timeout must not hold every process while other plans' renders queue.
const DefaultSizePerCPU = 4

// startTimeout bounds how long a render process may take to be ready.
const startTimeout = time.Minute

// idleFor is how long a process may wait for its next render before the
// pool retires it: a burst's processes do not stay for ever.
const idleFor = time.Minute

// grace is how long past a render's timeout its process may take to answer
// with its own message before the pool kills it.
const grace = 500 * time.Millisecond

// reply is a render process's answer to one job, or its first word: Ready.
type reply struct {
	// Ready is the first reply of a process, once it can take jobs: the
	// time it takes to start is not the render's.
	Ready  bool `json:",omitempty"`
	Result plan.Result
	Err    string `json:",omitempty"`
	// Bound says Err is a bound the render crossed.
	Bound bool `json:",omitempty"`
	// Exit says the process exits after this answer: its render timed out
	// and may still be running.
	Exit bool `json:",omitempty"`
}

// Pool runs jobs in up to Size render processes at once.
type Pool struct {
	// Size is the most processes (0: DefaultSizePerCPU per CPU).
	Size int
	// Executable is the binary to start (empty: this one).
	Executable string

	once    sync.Once
	slots   chan struct{}
	mu      sync.Mutex
	idle    []*process
	stopped bool
}

// process is one render process and its pipes.
type process struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	// enc and dec speak to the process: one job, one reply.
	enc  *json.Encoder
	dec  *json.Decoder
	done chan struct{} // closed once the process has exited
	err  error         // its exit, once done
	// idleSince is when it last finished a render.
	idleSince time.Time
}

func (p *Pool) init() {
	p.once.Do(func() {
		n := p.Size
		if n <= 0 {
			n = DefaultSizePerCPU * runtime.NumCPU()
		}
		p.slots = make(chan struct{}, n)
	})
}

// Run renders job in a render process: at most Size at once, each bounded
// by job.Bounds in time (the process is killed past it) and in memory (it
// stops itself).
func (p *Pool) Run(job plan.Job) (plan.Result, error) {
	p.init()
	p.slots <- struct{}{}
	defer func() { <-p.slots }()
	proc, err := p.take()
	if err != nil {
		return plan.Result{}, err
	}
	r, err := proc.render(job)
	if err != nil || r.Exit {
		proc.kill()
	} else {
		p.put(proc)
	}
	if err != nil {
		return plan.Result{}, err
	}
	if r.Err != "" {
		if r.Bound {
			return plan.Result{}, &plan.BoundError{Msg: r.Err}
		}
		return plan.Result{}, errors.New(r.Err)
	}
	return r.Result, nil
}

// Stop ends the idle processes, and each busy one as its render ends.
func (p *Pool) Stop() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.stopped = nil, true
	p.mu.Unlock()
	for _, proc := range idle {
		proc.kill()
	}
}

func (p *Pool) take() (*process, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		proc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		select {
		case <-proc.done: // died while idle
			continue
		default:
		}
		p.mu.Unlock()
		return proc, nil
	}
	p.mu.Unlock()
	return p.start()
}

// put keeps proc for the next render, and retires the processes that have
// waited longer than idleFor.
func (p *Pool) put(proc *process) {
	now := time.Now()
	proc.idleSince = now
	p.mu.Lock()
	var retired []*process
	if p.stopped {
		retired = append(retired, proc)
	} else {
		p.idle = append(p.idle, proc)
	}
	// The oldest idle processes are at the front: take serves the back.
	for len(p.idle) > 0 && now.Sub(p.idle[0].idleSince) > idleFor {
		retired = append(retired, p.idle[0])
		p.idle = p.idle[1:]
	}
	p.mu.Unlock()
	for _, r := range retired {
		r.kill()
	}
}

// start starts a render process.
func (p *Pool) start() (*process, error) {
	exe := p.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the executable to render in: %w", err)
		}
	}
	cmd := exec.Command(exe)
	// Nothing of the worker's environment (its credentials among it)
	// reaches a process that runs plan authors' templates, but the Go
	// runtime's own settings.
	cmd.Env = []string{childEnv + "=1"}
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG", "GORACE", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stderr = os.Stderr
	// The render process dies with the worker, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: starting a render process: %v", plan.ErrRenderUnavailable, err)
	}
	proc := &process{cmd: cmd, in: in, enc: json.NewEncoder(in), dec: json.NewDecoder(bufio.NewReader(out)), done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	ready := make(chan error, 1)
	go func() {
		var r reply
		err := proc.dec.Decode(&r)
		if err == nil && !r.Ready {
			err = errors.New("its first word was not that it is ready")
		}
		ready <- err
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case err := <-ready:
		if err != nil {
			proc.kill()
			return nil, fmt.Errorf("%w: a render process did not start: %v", plan.ErrRenderUnavailable, err)
		}
	case <-timer.C:
		proc.kill()
		return nil, fmt.Errorf("%w: a render process was not ready within %s", plan.ErrRenderUnavailable, startTimeout)
	}
	return proc, nil
}

// render sends job and waits for the answer, at most the job's timeout and
// a grace; a process that exits or runs past it is reported by the bound
// it crossed.
func (proc *process) render(job plan.Job) (reply, error) {
	got := make(chan struct {
		r   reply
		err error
	}, 1)
	go func() {
		var r reply
		err := proc.enc.Encode(job)
		if err == nil {
			err = proc.dec.Decode(&r)
		}
		got <- struct {
			r   reply
			err error
		}{r, err}
	}()
	timer := time.NewTimer(job.Bounds.Timeout + grace)
	defer timer.Stop()
	select {
	case g := <-got:
		if g.err == nil {
			return g.r, nil
		}
		<-proc.done // the pipe closed: the process is gone
		return reply{}, proc.exitError(job.Bounds)
	case <-timer.C:
		proc.kill()
		return reply{}, &plan.BoundError{Msg: fmt.Sprintf("the render took longer than %s (--render-timeout); its render process was stopped", job.Bounds.Timeout)}
	}
}

// exitError says why a process ended in the middle of a render.
func (proc *process) exitError(b plan.Bounds) error {
	var exit *exec.ExitError
	if errors.As(proc.err, &exit) && exit.ExitCode() == exitMemory {
		return &plan.BoundError{Msg: fmt.Sprintf("the render used more than %d bytes of memory (%d times --render-max-memory); its render process was stopped",
			heapFactor*b.MaxMemory, heapFactor)}
	}
	return fmt.Errorf("%w: the render process ended in the middle of a render: %v", plan.ErrRenderUnavailable, proc.err)
}

func (proc *process) kill() {
	_ = proc.in.Close()
	_ = proc.cmd.Process.Kill()
	<-proc.done
}
