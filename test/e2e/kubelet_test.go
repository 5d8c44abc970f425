package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/quartermaster/qm/internal/testenv"
)

// kubelet plays the kubelet's part for a release's pods on this machine, so
// that the chart's pod specs run as written, against the real API server.
// Each replica of a Deployment is a process of the image's entrypoint,
// started as a container runtime starts one:
//   - the container's command and arguments (the image's entrypoint when it
//     has no command), with $(VAR) references expanded;
//   - the image's environment, then the container's, with secretKeyRef,
//     configMapKeyRef and fieldRef resolved from the API server;
//   - its volumes (emptyDir, Secret, ConfigMap) as directories. A process
//     shares the machine's file system, so every absolute path of its
//     environment is rewritten into the volume mounted there or else into
//     the image's files, and TMPDIR names the volume mounted at /tmp; so
//     is an argument --flag=<path> whose path is under a mount;
//   - KUBECONFIG, a kubeconfig holding a TokenRequest token of the pod's own
//     service account (the projected token a kubelet mounts), so that every
//     call is authorised by the chart's roles;
//   - an address of its own, 127.<a>.<b>.<n>, as a pod has its own network:
//     arguments listening on ":<port>" listen there. The /24 is drawn at
//     random per run and an address whose ports are taken is passed over,
//     so that another run on the machine (or anything listening on a
//     wildcard address) does not collide with it;
//   - the user of its security context (runAsUser, runAsGroup, fsGroup,
//     else the image's USER; runAsNonRoot refuses root), over the image's
//     files owned by root and read-only for it, as readOnlyRootFilesystem
//     makes them, and volumes it may write as the kubelet makes them. A
//     test run by another user than root cannot switch, and runs them as
//     itself.
//
// It probes readiness and liveness as the container's probes say, and
// restarts a container whose liveness fails or that exits.
type kubelet struct {
	t    *testing.T
	kube *testenv.Cluster
	img  image
	// pods change on the test goroutine only; mu guards them against the
	// Services' proxies, which read them on theirs.
	mu   sync.Mutex
	pods []*pod
	// gone are the pods replace deleted, for their logs.
	gone []*pod
	// subnet is the run's 127.a.b; nextIP the last n given out.
	subnet string
	nextIP int
}

// pod is one replica, supervised until the test ends.
type pod struct {
	name   string
	labels map[string]string
	ip     string
	// ports are the container's, by name.
	ports     map[string]int32
	container corev1.Container
	argv, env []string
	// mounts are the volumes' directories by mount path, longest first.
	mounts []mount
	// readiness and liveness are the container's probes, defaults filled
	// in, with their URLs.
	readiness, liveness *probe
	grace               time.Duration
	// user is who the container runs as; nil: the test's own user.
	user *syscall.Credential
	log  *testenv.SyncBuffer

	ready    atomic.Bool
	restarts atomic.Int32
	// pid is the container's process, the last one started.
	pid  atomic.Int64
	done chan struct{}
	// stop terminates the pod as its deletion does: SIGTERM, then SIGKILL
	// after its grace period.
	stop context.CancelFunc
}

type mount struct{ path, dir string }

// restartBackoff is the kubelet's first crash-loop delay.
const restartBackoff = 10 * time.Second

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func newKubelet(t *testing.T, kube *testenv.Cluster, img image) *kubelet {
	return &kubelet{t: t, kube: kube, img: img, nextIP: 10, subnet: fmt.Sprintf("127.%d.%d", 1+rand.IntN(254), 1+rand.IntN(254))}
}

// address gives out the next address of the run's subnet on which every
// one of ports is free.
func (k *kubelet) address(ports []corev1.ContainerPort) string {
	for k.nextIP < 254 {
		k.nextIP++
		ip := fmt.Sprintf("%s.%d", k.subnet, k.nextIP)
		free := true
		for _, port := range ports {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port.ContainerPort))))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return ip
		}
	}
	k.t.Fatalf("no address in %s.0/24 with the ports %v free", k.subnet, ports)
	return ""
}

// run starts the Deployment's replicas.
func (k *kubelet) run(d *appsv1.Deployment) {
	k.t.Helper()
	for i := range ptr.Deref(d.Spec.Replicas, 1) {
		k.start(d, fmt.Sprintf("%s-%d", d.Name, i))
	}
}

func (k *kubelet) start(d *appsv1.Deployment, name string) {
	t := k.t
	t.Helper()
	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1, "%s: one container per pod", d.Name)
	require.Empty(t, spec.InitContainers, "%s: no init containers", d.Name)
	c := spec.Containers[0]
	p := &pod{name: name, labels: d.Spec.Template.Labels, ip: k.address(c.Ports), ports: map[string]int32{},
		container: c, log: &testenv.SyncBuffer{}, done: make(chan struct{}),
		grace: time.Duration(ptr.Deref(spec.TerminationGracePeriodSeconds, 30)) * time.Second}
	for _, port := range c.Ports {
		p.ports[port.Name] = port.ContainerPort
	}
	p.user = k.user(spec, c)
	root := t.TempDir()
	require.NoError(t, openDirs(root), "the pod's directory, for its user")
	volumes := k.volumes(d.Namespace, spec.Volumes, root)
	for _, m := range c.VolumeMounts {
		dir, ok := volumes[m.Name]
		require.True(t, ok, "%s mounts the volume %s it does not have", d.Name, m.Name)
		require.Empty(t, m.SubPath, "%s: subPath mounts are not run here", d.Name)
		p.mounts = append(p.mounts, mount{path: m.MountPath, dir: dir})
	}
	slices.SortFunc(p.mounts, func(a, b mount) int { return len(b.path) - len(a.path) })

	env := k.environment(d.Namespace, p)
	kubeconfig := filepath.Join(root, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(k.kubeconfig(d.Namespace, cmp.Or(spec.ServiceAccountName, "default")), kubeconfig))
	require.NoError(t, os.Chmod(kubeconfig, 0o644), "the token is readable by the pod's user, as a projected token is")
	env = append(env, "KUBECONFIG="+kubeconfig)
	if tmp, ok := p.hostPath("/tmp"); ok {
		env = append(env, "TMPDIR="+tmp)
	}
	p.env = env

	vars := map[string]string{}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		vars[name] = value
	}
	argv := slices.Concat(k.img.config.Entrypoint, k.img.config.Cmd)
	if len(c.Command) > 0 {
		argv = slices.Clone(c.Command)
	} else if len(c.Args) > 0 {
		argv = slices.Concat(k.img.config.Entrypoint, c.Args)
	}
	for i, arg := range argv {
		arg = varRef.ReplaceAllStringFunc(arg, func(ref string) string {
			if v, ok := vars[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
		if flag, port, ok := strings.Cut(arg, "=:"); ok && strings.HasPrefix(flag, "--") {
			arg = flag + "=" + p.ip + ":" + port
		}
		if flag, path, ok := strings.Cut(arg, "=/"); ok && strings.HasPrefix(flag, "--") {
			if host, mounted := p.hostPath("/" + path); mounted {
				arg = flag + "=" + host
			}
		}
		argv[i] = arg
	}
	require.True(t, strings.HasPrefix(argv[0], "/"), "%s: the command %q is a path in the image", d.Name, argv[0])
	argv[0] = filepath.Join(k.img.root, argv[0])
	p.argv = argv

	p.readiness, p.liveness = k.probe(p, c.ReadinessProbe), k.probe(p, c.LivenessProbe)
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go p.supervise(ctx, k.img.root)
	k.mu.Lock()
	k.pods = append(k.pods, p)
	k.mu.Unlock()
	t.Cleanup(func() {
		cancel()
		<-p.done
		if t.Failed() {
			t.Logf("--- output of pod %s (%d restarts):\n%s", p.name, p.restarts.Load(), tail(p.log.String(), 60))
		}
	})
}

// volumes writes each volume of a pod into a directory of its own.
func (k *kubelet) volumes(ns string, volumes []corev1.Volume, root string) map[string]string {
	t := k.t
	t.Helper()
	dirs := map[string]string{}
	for _, v := range volumes {
		dir := filepath.Join(root, "volumes", v.Name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		dirs[v.Name] = dir
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.EmptyDir != nil:
			// Anyone in the pod may write an emptyDir.
			require.NoError(t, os.Chmod(dir, 0o777))
			continue
		case v.Secret != nil:
			var s corev1.Secret
			require.NoError(t, k.kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: v.Secret.SecretName}, &s), "the volume %s", v.Name)
			data, items = s.Data, v.Secret.Items
		case v.ConfigMap != nil:
			var cm corev1.ConfigMap
			require.NoError(t, k.kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: v.ConfigMap.Name}, &cm), "the volume %s", v.Name)
			data = map[string][]byte{}
			for key, value := range cm.Data {
				data[key] = []byte(value)
			}
			items = v.ConfigMap.Items
		default:
			t.Fatalf("the volume %s is of a kind this kubelet does not mount", v.Name)
		}
		if len(items) == 0 {
			for key := range data {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		for _, item := range items {
			require.Contains(t, data, item.Key, "the volume %s", v.Name)
			require.NoError(t, os.WriteFile(filepath.Join(dir, item.Path), data[item.Key], 0o644))
		}
	}
	return dirs
}

// environment is the image's variables, then the container's, resolved.
func (k *kubelet) environment(ns string, p *pod) []string {
	t := k.t
	t.Helper()
	ctx := context.Background()
	env := slices.Clone(k.img.config.Env)
	for _, e := range p.container.Env {
		value := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
		case from.SecretKeyRef != nil:
			var s corev1.Secret
			require.NoError(t, k.kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: from.SecretKeyRef.Name}, &s), "the variable %s", e.Name)
			require.Contains(t, s.Data, from.SecretKeyRef.Key, "the variable %s", e.Name)
			value = string(s.Data[from.SecretKeyRef.Key])
		case from.ConfigMapKeyRef != nil:
			var cm corev1.ConfigMap
			require.NoError(t, k.kube.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: from.ConfigMapKeyRef.Name}, &cm), "the variable %s", e.Name)
			require.Contains(t, cm.Data, from.ConfigMapKeyRef.Key, "the variable %s", e.Name)
			value = cm.Data[from.ConfigMapKeyRef.Key]
		case from.FieldRef != nil:
			value = map[string]string{"metadata.namespace": ns, "metadata.name": p.name, "status.podIP": p.ip}[from.FieldRef.FieldPath]
			require.NotEmpty(t, value, "the variable %s: field %s", e.Name, from.FieldRef.FieldPath)
		default:
			t.Fatalf("the variable %s comes from a source this kubelet does not resolve", e.Name)
		}
		env = append(env, e.Name+"="+value)
	}
	require.Empty(t, p.container.EnvFrom, "envFrom is not resolved here")
	for i, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(value, "/") {
			if path, ok := p.hostPath(value); ok {
				value = path
			} else {
				value = filepath.Join(k.img.root, value)
			}
			env[i] = name + "=" + value
		}
	}
	return env
}

// user is who a container runs as: runAsUser and runAsGroup of the
// container, else of the pod, else the image's USER, with the pod's
// fsGroup as a supplementary group. runAsNonRoot refuses root, as the
// kubelet does. Nil when the test is not root and so cannot switch.
func (k *kubelet) user(spec corev1.PodSpec, c corev1.Container) *syscall.Credential {
	t := k.t
	t.Helper()
	uid, gid := int64(0), int64(0)
	if u, g, ok := strings.Cut(k.img.config.User, ":"); k.img.config.User != "" {
		var err error
		uid, err = strconv.ParseInt(u, 10, 32)
		require.NoError(t, err, "the image's USER %q is numeric", k.img.config.User)
		if ok {
			gid, err = strconv.ParseInt(g, 10, 32)
			require.NoError(t, err, "the image's USER %q is numeric", k.img.config.User)
		}
	}
	var fsGroup *int64
	nonRoot := false
	if psc := spec.SecurityContext; psc != nil {
		uid, gid = ptr.Deref(psc.RunAsUser, uid), ptr.Deref(psc.RunAsGroup, gid)
		fsGroup, nonRoot = psc.FSGroup, ptr.Deref(psc.RunAsNonRoot, false)
	}
	if csc := c.SecurityContext; csc != nil {
		uid, gid = ptr.Deref(csc.RunAsUser, uid), ptr.Deref(csc.RunAsGroup, gid)
		nonRoot = ptr.Deref(csc.RunAsNonRoot, nonRoot)
		if ptr.Deref(csc.ReadOnlyRootFilesystem, false) {
			require.NoError(t, readOnly(k.img.root), "the image's files, read-only")
		}
	}
	require.False(t, nonRoot && uid == 0, "%s: runAsNonRoot, and the container would run as root", c.Name)
	if os.Getuid() != 0 {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if fsGroup != nil {
		cred.Groups = []uint32{uint32(*fsGroup)}
	}
	return cred
}

// openDirs lets any user through dir and the test's temporary directory
// that holds it (which are the test user's alone).
func openDirs(dir string) error {
	return errors.Join(os.Chmod(dir, 0o755), os.Chmod(filepath.Dir(dir), 0o755))
}

// readOnly takes the write bits of group and others off every file and
// directory under root (they are the test user's): what
// readOnlyRootFilesystem makes of the image for any other user.
func readOnly(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(path, info.Mode().Perm()&^0o022)
	})
}

// hostPath is where a path of the container is on this machine, when it is
// in a volume.
func (p *pod) hostPath(path string) (string, bool) {
	for _, m := range p.mounts {
		if path == m.path || strings.HasPrefix(path, strings.TrimSuffix(m.path, "/")+"/") {
			return filepath.Join(m.dir, strings.TrimPrefix(path, m.path)), true
		}
	}
	return "", false
}

// kubeconfig reaches the API server as the service account ns/name, with a
// token of the TokenRequest API.
func (k *kubelet) kubeconfig(ns, name string) clientcmdapi.Config {
	t := k.t
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: k.kube.Config.Host, CertificateAuthorityData: k.kube.Config.CAData}
	cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: k.kube.ServiceAccountToken(t, ns, name)}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod", Namespace: ns}
	cfg.CurrentContext = "pod"
	return *cfg
}

// replace replaces the pod old by one of the Deployment d as a rolling
// update with a surge of one does: the new pod named name starts and
// becomes ready, then old is deleted (out of its Services at once, its
// process given its grace period) and replace returns once it is gone.
func (k *kubelet) replace(old *pod, d *appsv1.Deployment, name string) {
	k.t.Helper()
	k.start(d, name)
	p := k.pods[len(k.pods)-1]
	require.Eventually(k.t, p.ready.Load, 2*time.Minute, 100*time.Millisecond, "%s is ready", name)
	old.ready.Store(false)
	old.stop()
	select {
	case <-old.done:
	case <-time.After(old.grace + 30*time.Second):
		require.Fail(k.t, "the pod did not stop", "%s: within its grace period of %s", old.name, old.grace)
	}
	k.mu.Lock()
	k.pods = slices.DeleteFunc(k.pods, func(q *pod) bool { return q == old })
	k.mu.Unlock()
	k.gone = append(k.gone, old)
}

// podsOf are the pods of the Deployment named name, oldest first.
func (k *kubelet) podsOf(name string) []*pod {
	var out []*pod
	for _, p := range k.pods {
		if strings.HasPrefix(p.name, name+"-") {
			out = append(out, p)
		}
	}
	return out
}

// waitReady waits until every pod is ready.
func (k *kubelet) waitReady(within time.Duration) {
	k.t.Helper()
	require.EventuallyWithT(k.t, func(c *assert.CollectT) {
		for _, p := range k.pods {
			assert.True(c, p.ready.Load(), "%s is ready; its output:\n%s", p.name, tail(p.log.String(), 20))
		}
	}, within, 100*time.Millisecond)
}

// pod is the pod named name.
func (k *kubelet) pod(name string) *pod {
	k.t.Helper()
	i := slices.IndexFunc(k.pods, func(p *pod) bool { return p.name == name })
	require.GreaterOrEqual(k.t, i, 0, "no pod %s", name)
	return k.pods[i]
}

// service serves a Service as kube-proxy would: each request goes to the
// next ready pod its selector picks, on its target port. It returns the
// Service's URL.
func (k *kubelet) service(svc *corev1.Service) string {
	k.t.Helper()
	endpoints := k.endpoints(svc)
	var turn atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ready := endpoints()
		if len(ready) == 0 {
			http.Error(w, "no ready endpoint of the Service "+svc.Name, http.StatusServiceUnavailable)
			return
		}
		to, _ := url.Parse("http://" + ready[int(turn.Add(1))%len(ready)])
		httputil.NewSingleHostReverseProxy(to).ServeHTTP(w, r)
	}))
	k.t.Cleanup(proxy.Close)
	return proxy.URL
}

// serviceTCP serves a Service as kube-proxy does, below HTTP: each
// connection goes to the next ready pod, so that TLS is the client's and
// the pod's alone. It returns the address to dial.
func (k *kubelet) serviceTCP(svc *corev1.Service) string {
	k.t.Helper()
	endpoints := k.endpoints(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(k.t, err)
	k.t.Cleanup(func() { _ = ln.Close() })
	var turn atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed at the test's end
			}
			go func() {
				defer conn.Close()
				ready := endpoints()
				if len(ready) == 0 {
					return
				}
				to, err := net.Dial("tcp", ready[int(turn.Add(1))%len(ready)])
				if err != nil {
					return
				}
				defer to.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(to, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, to); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// endpoints lists the host:port of the Service's ready pods, now.
func (k *kubelet) endpoints(svc *corev1.Service) func() []string {
	k.t.Helper()
	require.Len(k.t, svc.Spec.Ports, 1, "the Service %s has one port", svc.Name)
	target := svc.Spec.Ports[0].TargetPort
	selector := labels.SelectorFromSet(svc.Spec.Selector)
	return func() []string {
		var endpoints []string
		k.mu.Lock()
		pods := slices.Clone(k.pods)
		k.mu.Unlock()
		for _, p := range pods {
			if p.ready.Load() && selector.Matches(labels.Set(p.labels)) {
				port := target.IntVal
				if target.StrVal != "" {
					port = p.ports[target.StrVal]
				}
				endpoints = append(endpoints, p.ip+":"+strconv.Itoa(int(port)))
			}
		}
		return endpoints
	}
}
