package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// probeTransport sends the probes. An HTTPS probe does not verify the
// certificate: the kubelet's do not.
var probeTransport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}

// probe is a container's HTTP probe, its defaults filled in, and its URL.
type probe struct {
	*corev1.Probe
	url string
}

// prober runs a probe on its period, for one run of a container, and
// keeps its thresholds' count.
type prober struct {
	*probe
	next      time.Time
	successes int
	failures  int
	ok        bool
}

// probe resolves an HTTP probe's URL and fills in the API server's defaults.
func (k *kubelet) probe(p *pod, spec *corev1.Probe) *probe {
	t := k.t
	t.Helper()
	if spec == nil {
		return nil
	}
	require.NotNil(t, spec.HTTPGet, "%s: only HTTP probes are run here", p.name)
	spec = spec.DeepCopy()
	port := spec.HTTPGet.Port.IntVal
	if name := spec.HTTPGet.Port.StrVal; name != "" {
		require.Contains(t, p.ports, name, "%s: the probe's port %s", p.name, name)
		port = p.ports[name]
	}
	for _, d := range []struct {
		field *int32
		def   int32
	}{{&spec.PeriodSeconds, 10}, {&spec.TimeoutSeconds, 1}, {&spec.SuccessThreshold, 1}, {&spec.FailureThreshold, 3}} {
		if *d.field == 0 {
			*d.field = d.def
		}
	}
	scheme := "http://"
	if spec.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https://"
	}
	return &probe{Probe: spec, url: scheme + p.ip + ":" + strconv.Itoa(int(port)) + spec.HTTPGet.Path}
}

// start begins probing a container that just started: a readiness probe
// fails until it passes, a liveness probe passes until it fails.
func (pr *probe) start(passing bool) *prober {
	if pr == nil {
		return nil
	}
	return &prober{probe: pr, ok: passing, next: time.Now().Add(time.Duration(pr.InitialDelaySeconds) * time.Second)}
}

// check runs the probe when it is due and returns whether it is passing,
// by its thresholds.
func (pr *prober) check(now time.Time) bool {
	if pr == nil || now.Before(pr.next) {
		return pr == nil || pr.ok
	}
	pr.next = now.Add(time.Duration(pr.PeriodSeconds) * time.Second)
	client := http.Client{Timeout: time.Duration(pr.TimeoutSeconds) * time.Second, Transport: probeTransport}
	passed := false
	if resp, err := client.Get(pr.url); err == nil {
		_ = resp.Body.Close()
		passed = resp.StatusCode >= 200 && resp.StatusCode < 400
	}
	if passed {
		pr.successes, pr.failures = pr.successes+1, 0
		pr.ok = pr.ok || pr.successes >= int(pr.SuccessThreshold)
	} else {
		pr.successes, pr.failures = 0, pr.failures+1
		pr.ok = pr.ok && pr.failures < int(pr.FailureThreshold)
	}
	return pr.ok
}

// supervise runs the container until ctx ends, restarting it when it exits
// or its liveness fails. It runs on a goroutine of its own and reports into
// the pod's log.
func (p *pod) supervise(ctx context.Context, dir string) {
	defer close(p.done)
	for {
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = p.env, dir, p.log, p.log
		if p.user != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.user}
		}
		exited := make(chan struct{})
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(p.log, "--- kubelet: starting the container: %v\n", err)
			close(exited)
		} else {
			p.pid.Store(int64(cmd.Process.Pid))
			go func() { _ = cmd.Wait(); close(exited) }()
		}
		p.watch(ctx, cmd, exited, p.readiness.start(false), p.liveness.start(true))
		p.ready.Store(false)
		if ctx.Err() != nil {
			return
		}
		p.restarts.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartBackoff):
		}
	}
}

// watch probes a running container until it exits, fails its liveness
// (then it is stopped) or ctx ends (then it is stopped too).
func (p *pod) watch(ctx context.Context, cmd *exec.Cmd, exited chan struct{}, readiness, liveness *prober) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			fmt.Fprintf(p.log, "--- kubelet: the container exited: %v\n", cmd.ProcessState)
			return
		case <-ctx.Done():
			// A pod being deleted leaves its Services' endpoints at once.
			p.ready.Store(false)
			p.terminate(cmd, exited)
			return
		case now := <-tick.C:
			p.ready.Store(readiness.check(now))
			if !liveness.check(now) {
				fmt.Fprintf(p.log, "--- kubelet: the liveness probe failed %d times: restarting the container\n", liveness.failures)
				p.terminate(cmd, exited)
				return
			}
		}
	}
}

// terminate sends SIGTERM, and SIGKILL when the grace period is over.
func (p *pod) terminate(cmd *exec.Cmd, exited chan struct{}) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(p.grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// TestProberThresholds: a readiness probe fails until its first pass, a
// liveness probe passes until its third failure in a row, each probing no
// more often than its period, as the kubelet does.
func TestProberThresholds(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	spec := &probe{Probe: &corev1.Probe{PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}, url: srv.URL}
	readiness, liveness := spec.start(false), spec.start(true)
	now := time.Now()
	period := 10 * time.Second

	assert.False(t, readiness.check(now), "not ready before a pass")
	assert.True(t, liveness.check(now), "alive after one failure")
	healthy.Store(true)
	assert.False(t, readiness.check(now.Add(time.Second)), "not probed again within its period")
	assert.True(t, readiness.check(now.Add(period)), "ready at its first pass")
	assert.True(t, liveness.check(now.Add(period)), "a pass resets the failures")

	healthy.Store(false)
	for i := 2; i <= 3; i++ {
		at := now.Add(time.Duration(i) * period)
		assert.True(t, liveness.check(at), "alive after %d failures in a row", i-1)
		assert.True(t, readiness.check(at), "ready after %d failures in a row", i-1)
	}
	assert.False(t, liveness.check(now.Add(4*period)), "dead at its third failure in a row")
	assert.False(t, readiness.check(now.Add(4*period)), "not ready at its third failure")
}
