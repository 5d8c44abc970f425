// Package childproc makes the servers that qm starts through libraries
// (etcd and kube-apiserver through envtest, temporal through the SDK's dev
// server) die with the process that started them, even when that process
// is killed with SIGKILL, and lets a later start clean up what a crashed
// run left behind.
//
// The libraries start a binary by its path, with arguments of their own,
// and take no process attributes. So the parent points them at links named
// after each binary, which lead to its own executable (Links). Started
// through a link, qm (or a test binary) calls Run first thing: it asks the
// kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG, which execve
// keeps), records its pid, and executes the real binary in its place.
package childproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The environment that tells a start through a link what to run: the
// parent's pid, and per link name the real binary and its pid file.
const (
	envParent   = "QM_CHILD_PARENT"
	envChildren = "QM_CHILD_LINKS"
)

// child is where a link leads.
type child struct {
	Binary  string `json:"binary"`
	PidFile string `json:"pidFile"`
	// Env is added to the environment the binary runs with.
	Env []string `json:"env,omitempty"`
}

// mu serializes Links, which reads and writes the process's environment.
var mu sync.Mutex

// wired is set by Run: a program whose main does not call it would run
// itself, not the server, through a link.
var wired atomic.Bool

// children reads the links of the environment.
func children() map[string]child {
	m := map[string]child{}
	_ = json.Unmarshal([]byte(os.Getenv(envChildren)), &m)
	return m
}

// Links creates linkDir/<name> for each name, leading to the running
// executable, and sets this process's environment so that a child started
// through one runs binDir/<name>, with env added to its environment, and
// records its pid in pidDir/<name>.pid. It returns linkDir, to give a
// library as the binaries' directory.
func Links(linkDir, binDir, pidDir string, env []string, names ...string) (string, error) {
	if !wired.Load() {
		return "", errors.New("childproc.Run must be called first in main (or TestMain: testenv.Main) before servers start through links")
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding qm's own executable: %w", err)
	}
	for _, dir := range []string{linkDir, pidDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return "", err
	}
	if pidDir, err = filepath.Abs(pidDir); err != nil {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	links := children()
	for _, name := range names {
		links[name] = child{Binary: filepath.Join(binDir, name), PidFile: filepath.Join(pidDir, name+".pid"), Env: env}
		link := filepath.Join(linkDir, name)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if err := os.Symlink(self, link); err != nil {
			return "", fmt.Errorf("linking %s: %w", link, err)
		}
	}
	raw, err := json.Marshal(links)
	if err != nil {
		return "", err
	}
	if err := errors.Join(os.Setenv(envChildren, string(raw)), os.Setenv(envParent, strconv.Itoa(os.Getpid()))); err != nil {
		return "", err
	}
	return filepath.Abs(linkDir)
}

// Run returns at once unless this process was started through a link of
// Links; then it becomes the real binary and does not return (or exits 1
// when that cannot be, or when its parent is gone already).
func Run() {
	wired.Store(true)
	name := filepath.Base(os.Args[0])
	c, ok := children()[name]
	if !ok {
		return
	}
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "qm: starting %s as a child: %v\n", name, err)
		os.Exit(1)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		fail(fmt.Errorf("asking to die with the parent: %w", err))
	}
	// The parent may have died before the request: then nothing would
	// send the signal.
	if strconv.Itoa(os.Getppid()) != os.Getenv(envParent) {
		fail(errors.New("the parent is gone"))
	}
	if err := os.WriteFile(c.PidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		fail(err)
	}
	// The real binary's own children must not take the links for theirs.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "QM_CHILD_")
	})
	env = append(env, c.Env...)
	fail(syscall.Exec(c.Binary, append([]string{c.Binary}, os.Args[1:]...), env))
}

// Cleanup kills what a crashed run left running: each process that a pid
// file of pidDir names and that still runs binDir/<name>. It returns a line
// per process killed.
func Cleanup(pidDir, binDir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(pidDir, "*.pid"))
	if err != nil {
		return nil, err
	}
	var killed []string
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".pid")
		raw, err := os.ReadFile(file)
		if err != nil {
			return killed, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			_ = os.Remove(file)
			continue
		}
		if ours(pid, name, binDir) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return killed, fmt.Errorf("killing %s (pid %d) left by an earlier run: %w", name, pid, err)
			}
			if err := waitGone(pid, 10*time.Second); err != nil {
				return killed, fmt.Errorf("%s (pid %d) left by an earlier run: %w", name, pid, err)
			}
			killed = append(killed, fmt.Sprintf("%s (pid %d)", name, pid))
		}
		_ = os.Remove(file)
	}
	return killed, nil
}

// ours reports whether pid still runs binDir/name. A process that is
// exiting has no executable link left, yet may still hold its ports: its
// command name tells then.
func ours(pid int, name, binDir string) bool {
	if !Alive(pid) {
		return false
	}
	real, _ := filepath.Abs(filepath.Join(binDir, name))
	// The kernel names the executable by its resolved path: a bin
	// directory reached through a symbolic link must be resolved too.
	if resolved, err := filepath.EvalSymlinks(real); err == nil {
		real = resolved
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		return exe == real
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == name[:min(len(name), 15)]
}

// waitGone waits until pid is no more, or a zombie.
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !Alive(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("still running after SIGKILL")
}

// Alive reports whether pid runs (a zombie does not).
func Alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// Running returns the pid a pid file names, and whether that process still
// runs (a zombie does not).
func Running(pidFile string) (int, bool) {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, false
	}
	return pid, Alive(pid)
}
