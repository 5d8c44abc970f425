// Package controlplane runs a real Kubernetes cluster on this machine, from
// the binaries `make tools` builds into bin/: kube-apiserver and etcd
// through controller-runtime's envtest, then kube-controller-manager,
// kube-scheduler and kwok, whose simulated nodes take the scheduled pods
// through their lifecycle (no container runs). It installs Quartermaster's
// CRDs on it or on any other cluster. It is what `qm dev` and the
// integration tests stand on.
package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/quartermaster/qm/crds"
	osbv1alpha1 "github.com/quartermaster/qm/crds/osb/v1alpha1"
	primazav1alpha1 "github.com/quartermaster/qm/crds/primaza/v1alpha1"
	"github.com/quartermaster/qm/internal/childproc"
)

// Options configure an embedded control plane.
type Options struct {
	// BinDir holds the binaries: kube-apiserver, etcd, kube-controller-manager,
	// kube-scheduler, kwok and kwok's stages.
	BinDir string
	// DataDir keeps the cluster across restarts: etcd's data in DataDir/etcd,
	// the service-account signing key and the components' kubeconfig in
	// DataDir/cluster. Empty means a temporary directory removed on Stop.
	DataDir string
	// Bare starts only kube-apiserver and etcd: no controllers, no
	// scheduler, no nodes. For measuring what the API server alone costs.
	Bare bool
	// NoWatchCache serves every read from etcd, as the API server does
	// once its cache no longer holds what a request refers to: with it, a
	// compaction of etcd expires an older continue token at once.
	NoWatchCache bool
	// Nodes is the number of simulated nodes (0: DefaultNodes).
	Nodes int
	// Port is the API server's secure port on 127.0.0.1; 0 picks a free one.
	Port int
	// Out receives the output of both processes; nil discards it.
	Out io.Writer
	// Audit has the API server write an audit event (JSON lines, Metadata
	// level) for every request of a service account to ControlPlane.AuditLog:
	// who asked for which verb on which resource, and the answer's code.
	// Requests of other users are not recorded.
	Audit bool
	// NoFsync has etcd write without fsync: for clusters whose data need
	// not outlive the machine's power (the tests'), whose every write then
	// waits on no disk.
	NoFsync bool
	// Env is added to the environment of each of the cluster's processes:
	// the tests tune the Go runtime's garbage collector there (GOGC).
	Env []string
}

// auditPolicy records the metadata of service accounts' requests once
// answered (a watch also when it starts, as it may never end), and nothing
// of other users (the cluster's own components, tests as system:masters).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
`

// ControlPlane is a running cluster with the CRDs installed.
type ControlPlane struct {
	env        *envtest.Environment
	components []*component
	// tempDir is removed on Stop when Options.DataDir was empty.
	tempDir string
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is Config as a kubeconfig file, for kubectl.
	Kubeconfig []byte
	// AuditLog is the API server's audit log, with Options.Audit.
	AuditLog string
	// EtcdURL is etcd's client URL: tests compact it, as the API server
	// would every five minutes, to expire what refers to old revisions.
	EtcdURL string

	clusterDir string
	out        io.Writer
	// procEnv is Options.Env.
	procEnv []string
}

// Start starts etcd and kube-apiserver, waits until they serve, installs
// every Quartermaster CRD and admission policy and, unless opts.Bare, starts
// the controllers, the scheduler and the simulated nodes and waits until
// they work.
func Start(opts Options) (*ControlPlane, error) {
	defs, err := crds.Definitions()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{out: opts.Out, procEnv: opts.Env}
	dataDir := opts.DataDir
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "qm-cluster-"); err != nil {
			return nil, err
		}
		cp.tempDir = dataDir
	}
	if dataDir, err = filepath.Abs(dataDir); err != nil {
		return nil, err
	}
	clusterDir := filepath.Join(dataDir, "cluster")
	cp.clusterDir = clusterDir
	if err := os.MkdirAll(clusterDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", clusterDir, err)
	}
	// What etcd and kube-apiserver printed last goes into the error of a
	// start that fails, wherever their output goes otherwise.
	etcdTail, apiTail := &childproc.Tail{}, &childproc.Tail{}
	etcdOut, apiOut := teeTo(opts.Out, etcdTail), teeTo(opts.Out, apiTail)
	etcd := &envtest.Etcd{Out: etcdOut, Err: etcdOut, DataDir: filepath.Join(dataDir, "etcd")}
	if opts.NoFsync {
		etcd.Configure().Set("unsafe-no-fsync", "true")
	}
	apiServer := &envtest.APIServer{Out: apiOut, Err: apiOut}
	if opts.Port != 0 {
		apiServer.SecureServing.Address = "127.0.0.1"
		apiServer.SecureServing.Port = strconv.Itoa(opts.Port)
	}
	if opts.NoWatchCache {
		apiServer.Configure().Set("watch-cache", "false")
	}
	adminToken, tokenFile, err := adminTokenFile(clusterDir)
	if err != nil {
		return nil, err
	}
	apiServer.Configure().Set("token-auth-file", tokenFile)
	if !opts.Bare {
		key, err := serviceAccountKey(clusterDir)
		if err != nil {
			return nil, err
		}
		apiServer.Configure().
			Set("service-account-key-file", key).
			Set("service-account-signing-key-file", key).
			// envtest turns the ServiceAccount admission off because a bare
			// API server has no controller to create service accounts; this
			// one has, so pods get their account as on a real cluster.
			Disable("disable-admission-plugins").
			Set("service-cluster-ip-range", serviceRange)
	}
	if opts.Audit {
		policy := filepath.Join(clusterDir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, fmt.Errorf("writing the audit policy: %w", err)
		}
		cp.AuditLog = filepath.Join(clusterDir, "audit.log")
		apiServer.Configure().
			Set("audit-policy-file", policy).
			Set("audit-log-path", cp.AuditLog).
			Set("audit-log-format", "json").
			// Written as requests end, not batched, so that a test reads
			// the requests it made as soon as they are answered.
			Set("audit-log-mode", "blocking").
			// One file, never rotated (0 would rotate at 100 MB): the
			// tests read it whole, and a benchmark of ten thousand
			// instances writes hundreds of MB.
			Set("audit-log-maxsize", "1000000")
	}
	// etcd and kube-apiserver die with this process even on SIGKILL, and
	// whatever a crashed run left holding their ports goes first.
	pidDir := filepath.Join(clusterDir, "pids")
	killed, err := childproc.Cleanup(pidDir, opts.BinDir)
	if err != nil {
		return nil, err
	}
	if len(killed) > 0 && opts.Out != nil {
		fmt.Fprintf(opts.Out, "stopped what an earlier run left running: %s\n", strings.Join(killed, ", "))
	}
	binDir, err := childproc.Links(filepath.Join(clusterDir, "bin"), opts.BinDir, pidDir, opts.Env, "etcd", "kube-apiserver")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		ControlPlane:             envtest.ControlPlane{Etcd: etcd, APIServer: apiServer},
		CRDInstallOptions:        envtest.CRDInstallOptions{CRDs: defs},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		Scheme:                   crds.NewScheme(),
	}
	cp.env = env
	cfg, err := env.Start()
	if err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w%s%s", opts.BinDir, err, etcdTail.Quote("etcd"), apiTail.Quote("kube-apiserver"))
	}
	cp.Config, cp.Kubeconfig, cp.EtcdURL = withToken(cfg, adminToken), env.KubeConfig, etcd.URL.String()
	if err := InstallAdmissionPolicies(cp.Config); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if !opts.Bare {
		if err := cp.startClusterParts(opts, clusterDir); err != nil {
			_ = cp.Stop()
			return nil, err
		}
	}
	return cp, nil
}

// teeTo is w and tail, or tail alone when w is nil.
func teeTo(w io.Writer, tail *childproc.Tail) io.Writer {
	if w == nil {
		return tail
	}
	return io.MultiWriter(w, tail)
}

// Stop stops the cluster. Its state stays if Options.DataDir was set.
func (c *ControlPlane) Stop() error {
	errs := []error{c.stopComponents(), c.env.Stop()}
	if c.tempDir != "" {
		errs = append(errs, os.RemoveAll(c.tempDir))
	}
	return errors.Join(errs...)
}

// InstallCRDs creates or updates every Quartermaster CRD on the cluster that
// cfg reaches, and waits until they are established. It installs the
// admission policies as well where the cluster has them (Kubernetes 1.36
// and later); on an older cluster the watcher adds finalizers instead, and
// ErrNoAdmissionPolicies says so.
func InstallCRDs(cfg *rest.Config) error {
	defs, err := crds.Definitions()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: defs, Scheme: crds.NewScheme()}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	return InstallAdmissionPolicies(cfg)
}

// ErrNoAdmissionPolicies means the cluster serves no MutatingAdmissionPolicy
// API, so finalizers are added by the watcher after each create.
var ErrNoAdmissionPolicies = errors.New("the cluster has no MutatingAdmissionPolicy API (Kubernetes < 1.36): the watcher adds finalizers after each create")

// fieldOwner names qm in the managed fields of what it installs.
const fieldOwner = client.FieldOwner("qm")

// InstallAdmissionPolicies applies the policies that give new instances and
// bindings their finalizers, and waits until the API server enforces them:
// policies take effect some moments after they are written.
func InstallAdmissionPolicies(cfg *rest.Config) error {
	objs, err := crds.AdmissionPolicies()
	if err != nil {
		return err
	}
	c, err := crds.NewClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, obj := range objs {
		if err := c.Patch(ctx, obj, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
			if meta.IsNoMatchError(err) {
				return ErrNoAdmissionPolicies
			}
			return fmt.Errorf("applying %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	// A dry-run create goes through admission and stores nothing.
	probe := func(obj client.Object, finalizer string) wait.ConditionWithContextFunc {
		return func(ctx context.Context) (bool, error) {
			o := obj.DeepCopyObject().(client.Object)
			err := c.Create(ctx, o, client.DryRunAll)
			if meta.IsNoMatchError(err) || apierrors.IsServiceUnavailable(err) {
				// The CRD is established but not yet discovered, or not yet
				// known to the policies' type checker (a 503 until then).
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("dry-run create of a %T to check the admission policies: %w", o, err)
			}
			return slices.Contains(o.GetFinalizers(), finalizer), nil
		}
	}
	probeMeta := metav1.ObjectMeta{Name: "qm-admission-probe", Namespace: metav1.NamespaceDefault}
	checks := []wait.ConditionWithContextFunc{
		probe(&osbv1alpha1.SFServiceInstance{ObjectMeta: probeMeta, Spec: osbv1alpha1.SFServiceInstanceSpec{ServiceID: "probe", PlanID: "probe"}}, osbv1alpha1.InstanceFinalizer),
		probe(&osbv1alpha1.SFServiceBinding{ObjectMeta: probeMeta, Spec: osbv1alpha1.SFServiceBindingSpec{ID: "probe", InstanceID: "probe", ServiceID: "probe", PlanID: "probe"}}, osbv1alpha1.BindingFinalizer),
		probe(&primazav1alpha1.ServiceClaim{ObjectMeta: probeMeta, Spec: primazav1alpha1.ServiceClaimSpec{
			ServiceClassIdentity: []primazav1alpha1.ServiceClassIdentityItem{{Name: "type", Value: "probe"}}, ServiceEndpointDefinitionKeys: []string{"probe"}, EnvironmentTag: "probe"}},
			primazav1alpha1.ClaimFinalizer),
	}
	for _, check := range checks {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, check); err != nil {
			return fmt.Errorf("waiting for the finalizer admission policies to take effect: %w", err)
		}
	}
	return nil
}

// adminTokenFile writes the API server's token file: one token, of an
// administrator (system:masters). Config presents it instead of envtest's
// client certificate: the API server verifies a certificate's chain on
// every request, a sixteenth of its CPU under the tests, and looks a token
// up in a map.
func adminTokenFile(dir string) (token, path string, err error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	token = hex.EncodeToString(raw)
	path = filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(path, []byte(token+",qm-admin,qm-admin,system:masters\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("writing the API server's token file: %w", err)
	}
	return token, path, nil
}

// withToken is cfg presenting token, and no client certificate.
func withToken(cfg *rest.Config, token string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.CertData, c.KeyData, c.CertFile, c.KeyFile = nil, nil, "", ""
	c.BearerToken = token
	return c
}
