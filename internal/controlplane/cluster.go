package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	_ "embed"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Controllers are the kube-controller-manager controllers the embedded
// cluster runs: what garbage-collects owned objects, finishes namespace
// deletion, gives workloads their pods and service accounts their tokens.
// The node lifecycle controller lifts the not-ready taint the API server
// puts on every new node, once kwok reports the node Ready.
var Controllers = []string{
	"node-lifecycle-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"deployment-controller",
	"replicaset-controller",
	"resourcequota-controller",
	"statefulset-controller",
	"job-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
	"disruption-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"endpoints-controller",
	"endpointslice-controller",
}

// Node capacity of each simulated node: a large real machine. Three of
// them hold a burst of a thousand instances of each sample plan (a
// key-value store's pod asks for 250m and 256Mi), and a plan asking for
// more than a node has is still never scheduled.
var nodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("128"),
	corev1.ResourceMemory: resource.MustParse("512Gi"),
	corev1.ResourcePods:   resource.MustParse("500"),
}

// serviceRange is the cluster's Service IP range: a /16, as on kubeadm's
// clusters, where envtest's /24 runs out after 254 Services.
const serviceRange = "10.96.0.0/16"

// clientRate is the API request rate of kube-controller-manager and
// kube-scheduler: a burst of a thousand workloads is scheduled in seconds,
// not in the minutes their default of 20 and 50 requests a second take.
const clientRate = "--kube-api-qps=300"

const (
	// DefaultNodes is how many simulated nodes a cluster has.
	DefaultNodes = 3
	// kwokNodeAnnotation marks the nodes kwok manages, as kwokctl marks them.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KwokStages is the stage configuration `make tools` writes next to
	// kwok: kwok's own default stages, as kwokctl configures them.
	KwokStages = "kwok-stages.yaml"
	// kwokImagesFile holds kwokImages in the cluster's directory.
	kwokImagesFile = "kwok-images.yaml"
	// UnpullableImage is never pulled on the simulated nodes: its pods
	// stay Pending with ErrImagePull.
	UnpullableImage = "quartermaster.invalid/unpullable"
	// FailingImage runs and exits 1 on the simulated nodes; every other
	// image of a Job's pod exits 0.
	FailingImage = "quartermaster.invalid/fail"
	// HangingImage runs and never ends on the simulated nodes.
	HangingImage = "quartermaster.invalid/hang"
	// saKeyFile signs service-account tokens; the API server verifies with it.
	saKeyFile = "sa-signer.key"
)

// kwokImages are the stages of UnpullableImage, FailingImage and
// HangingImage.
//
//go:embed kwok-images.yaml
var kwokImages []byte

// component is one child process of the cluster.
type component struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startClusterParts starts kube-controller-manager, kube-scheduler and kwok
// against a running API server, registers the simulated nodes, and waits
// until the controllers and the nodes are at work.
func (c *ControlPlane) startClusterParts(opts Options, dir string) error {
	kubeconfig, err := c.componentKubeconfig(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, kwokImagesFile), kwokImages, 0o600); err != nil {
		return fmt.Errorf("writing kwok's stages of simulated images: %w", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, c.Config.CAData, 0o600); err != nil {
		return fmt.Errorf("writing the API server's CA for kube-controller-manager: %w", err)
	}
	starts := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=" + strings.Join(Controllers, ","),
			"--service-account-private-key-file=" + filepath.Join(dir, saKeyFile),
			"--root-ca-file=" + caFile,
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			"--secure-port=0",
			// A simulated cluster has few objects: sync them quickly.
			"--concurrent-gc-syncs=5",
			// Lift a new node's not-ready taint within a second of kwok
			// reporting it Ready, not within the default five.
			"--node-monitor-period=1s",
			clientRate, "--kube-api-burst=600",
		}},
		{"kube-scheduler", []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			clientRate, "--kube-api-burst=600",
		}},
		{"kwok", []string{
			"--kubeconfig=" + kubeconfig,
			"--config=" + filepath.Join(opts.BinDir, KwokStages),
			"--config=" + filepath.Join(dir, kwokImagesFile),
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			"--node-lease-duration-seconds=40",
			"--cidr=10.244.0.0/16",
			"--node-ip=10.243.0.1",
		}},
	}
	for _, s := range starts {
		if err := c.startComponent(opts, s.name, s.args); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	nodes := opts.Nodes
	if nodes == 0 {
		nodes = DefaultNodes
	}
	if err := registerNodes(ctx, kube, nodes); err != nil {
		return err
	}
	return c.waitReady(ctx, kube, nodes)
}

// UserKubeconfig is a kubeconfig of a new user of the API server, authenticated
// by a client certificate, in groups (none: a user that RBAC allows nothing
// beyond discovery).
func (c *ControlPlane) UserKubeconfig(name string, groups ...string) ([]byte, error) {
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("creating the user %s: %w", name, err)
	}
	return user.KubeConfig()
}

// componentKubeconfig writes a kubeconfig for the cluster's own components,
// as a member of system:masters.
func (c *ControlPlane) componentKubeconfig(dir string) (string, error) {
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: "qm-cluster-components", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("creating the cluster components' user: %w", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "components.kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return "", fmt.Errorf("writing the components' kubeconfig: %w", err)
	}
	return path, nil
}

func (c *ControlPlane) startComponent(opts Options, name string, args []string) error {
	path := filepath.Join(opts.BinDir, name)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A test binary that dies must not leave the components running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s (run `make tools`): %w", path, err)
	}
	comp := &component{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(comp.done)
	}()
	c.components = append(c.components, comp)
	return nil
}

// registerNodes creates the simulated nodes, with their capacity, for kwok
// to manage. An existing node (a restarted `qm dev`) is left as it is.
func registerNodes(ctx context.Context, kube client.Client, n int) error {
	for i := range n {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{kwokNodeAnnotation: "fake"},
				Labels: map[string]string{
					"type":                   "kwok",
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
				},
			},
			Status: corev1.NodeStatus{Capacity: nodeCapacity, Allocatable: nodeCapacity},
		}
		if err := kube.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering simulated node %s: %w", name, err)
		}
	}
	return nil
}

// waitReady waits until every node is schedulable and
// kube-controller-manager has given the default namespace its service
// account, or a component exits.
func (c *ControlPlane) waitReady(ctx context.Context, kube client.Client, nodes int) error {
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, comp := range c.components {
			select {
			case <-comp.done:
				return false, fmt.Errorf("%s exited at start: %v", comp.name, comp.cmd.ProcessState)
			default:
			}
		}
		var list corev1.NodeList
		if err := kube.List(ctx, &list); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			if schedulable(n) {
				ready++
			}
		}
		if ready < nodes {
			return false, nil
		}
		err := kube.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "default"}, &corev1.ServiceAccount{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// schedulable tells whether a node is Ready and free of the not-ready taint.
func schedulable(n corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stopComponents stops the cluster's components, the ones started last first.
func (c *ControlPlane) stopComponents() error {
	var errs []error
	for i := len(c.components) - 1; i >= 0; i-- {
		comp := c.components[i]
		_ = comp.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-comp.done:
		case <-time.After(10 * time.Second):
			_ = comp.cmd.Process.Kill()
			<-comp.done
			errs = append(errs, fmt.Errorf("%s did not stop in 10s and was killed", comp.name))
		}
	}
	c.components = nil
	return errors.Join(errs...)
}

// serviceAccountKey returns the key file that signs service-account tokens,
// generated on the first start and kept in dir, so that the tokens of a
// restarted cluster stay valid.
func serviceAccountKey(dir string) (string, error) {
	path := filepath.Join(dir, saKeyFile)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	raw := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return "", fmt.Errorf("writing the service-account signing key: %w", err)
	}
	return path, nil
}
