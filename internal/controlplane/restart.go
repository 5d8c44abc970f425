package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster/qm/internal/childproc"
)

// RestartAPIServer kills kube-apiserver, leaves the cluster without it for
// down (etcd keeps the data), and starts it again with the same flags; it
// returns once the new one serves. For chaos runs: what a crashed or
// upgraded API server looks like to Quartermaster.
func (c *ControlPlane) RestartAPIServer(down time.Duration) error {
	pidFile := filepath.Join(c.clusterDir, "pids", "kube-apiserver.pid")
	pid, ok := childproc.Running(pidFile)
	if !ok {
		return fmt.Errorf("kube-apiserver is not running (pid file %s)", pidFile)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return fmt.Errorf("reading kube-apiserver's flags: %w", err)
	}
	args := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, ok := childproc.Running(pidFile); !ok {
			break
		}
	}
	time.Sleep(down)

	cmd := exec.Command(string(args[0]))
	for _, a := range args[1:] {
		cmd.Args = append(cmd.Args, string(a))
	}
	out := c.out
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), c.procEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	comp := &component{name: "kube-apiserver", cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(comp.done) }()
	c.components = append(c.components, comp)

	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}
