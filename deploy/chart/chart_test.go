// Package chart_test checks the Helm chart of Quartermaster
// (deploy/chart/quartermaster) as `helm lint`, `helm template` and
// `helm install` would, through Helm's Go SDK, against the real API server.
package chart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	qmapi "github.com/quartermaster/qm/api"
	"github.com/quartermaster/qm/internal/testenv"
	qmworker "github.com/quartermaster/qm/worker"
)

// chartDir is the chart under test.
const chartDir = "quartermaster"

func TestMain(m *testing.M) { testenv.Main(m) }

// variation is a set of values `helm template` must render.
type variation struct {
	name string
	set  string
	// check looks at the rendered objects, by "Kind/name".
	check func(t *testing.T, objs map[string]*unstructured.Unstructured)
}

var variations = []variation{
	{name: "defaults", check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		for _, name := range []string{"Secret/qm-quartermaster-osb", "Secret/qm-quartermaster-admin",
			"PodDisruptionBudget/qm-quartermaster-api", "PodDisruptionBudget/qm-quartermaster-watcher", "PodDisruptionBudget/qm-quartermaster-worker",
			"MutatingAdmissionPolicy/qm-quartermaster-instance-finalizer", "MutatingAdmissionPolicyBinding/qm-quartermaster-instance-finalizer",
			"CustomResourceDefinition/sfserviceinstances.osb.servicefabrik.io", "Service/qm-quartermaster-api"} {
			assert.Contains(t, objs, name)
		}
		assert.NotContains(t, objs, "HorizontalPodAutoscaler/qm-quartermaster-worker")
		assert.NotContains(t, objs, "ServiceMonitor/qm-quartermaster")
		assert.NotContains(t, objs, "ConfigMap/qm-quartermaster-dashboard", "the dashboard is off by default")
		assert.NotContains(t, objs, "PrometheusRule/qm-quartermaster", "the alerts are off by default")
		assert.NotContains(t, objs, "SFPlan/key-value-store-small", "the sample catalog is off by default")
		worker := objs["Deployment/qm-quartermaster-worker"]
		assert.EqualValues(t, 2, dig(worker.Object, "spec", "replicas"))
		pod := podSpec(t, worker)
		c := pod["containers"].([]any)[0].(map[string]any)
		assert.Equal(t, "ghcr.io/quartermaster/qm:0.1.0", c["image"])
		assert.Equal(t, "/readyz", dig(c, "readinessProbe", "httpGet", "path"))
		assert.Equal(t, true, dig(c, "securityContext", "readOnlyRootFilesystem"))
		assert.Equal(t, []any{"ALL"}, dig(c, "securityContext", "capabilities", "drop"))
		assert.Equal(t, true, dig(pod, "securityContext", "runAsNonRoot"))
		spread := pod["topologySpreadConstraints"].([]any)
		assert.Equal(t, "topology.kubernetes.io/zone", spread[0].(map[string]any)["topologyKey"])
		assert.Contains(t, envOf(c), "TEMPORAL_ADDRESS=temporal-frontend.temporal:7233")
		assert.Contains(t, envOf(c), "QM_TEMPORAL_GRPC_COMPRESSION=none")
		assert.Contains(t, c["args"], "--scheduler=default")
		api := objs["Deployment/qm-quartermaster-api"]
		assert.Contains(t, envOf(podSpec(t, api)["containers"].([]any)[0].(map[string]any)), "QM_OSB_PASSWORD<-qm-quartermaster-osb/password")
		// A pod told to stop is given the time its process drains in.
		grace := func(d string) time.Duration {
			return time.Duration(podSpec(t, objs["Deployment/qm-quartermaster-"+d])["terminationGracePeriodSeconds"].(float64)) * time.Second
		}
		assert.Greater(t, grace("worker"), qmworker.DefaultStopTimeout+900*time.Second, "the worker drains its pinned runs, then finishes its tasks in hand")
		// The workers are a build of the release's worker deployment, the
		// image's tag, made current by a newer revision.
		for _, want := range []string{"QM_WORKER_DEPLOYMENT=qm-quartermaster", "QM_BUILD_ID=0.1.0", "QM_RELEASE_REVISION=1"} {
			assert.Contains(t, envOf(c), want)
		}
		assert.Contains(t, c["args"], "--drain-timeout=900s")
		// A rollback re-deploys an earlier revision's manifest, whose pods
		// carry its revision: the hook of that manifest routes to its build.
		hooks := testenv.RenderChartHooks(t, load(t), "default", nil)
		job := hooks["Job/qm-quartermaster-builds-rollback"]
		require.NotNil(t, job, "the rollback hook")
		assert.Equal(t, "post-rollback", job.GetAnnotations()["helm.sh/hook"])
		hook := podSpec(t, job)
		assert.Equal(t, false, hook["automountServiceAccountToken"], "it speaks to Temporal only")
		hc := hook["containers"].([]any)[0].(map[string]any)
		assert.Equal(t, []any{"builds", "current", "0.1.0", "--wait=10m", "--deployment-name=qm-quartermaster", "--log-level=info"}, hc["args"])
		assert.Contains(t, envOf(hc), "TEMPORAL_ADDRESS=temporal-frontend.temporal:7233")
		assert.Greater(t, grace("api"), (&qmapi.Server{}).DrainTimeout(), "the API finishes its requests in flight")
	}},
	{name: "existing secrets and mTLS", set: "credentials.osb.existingSecret=platform-creds,credentials.admin.existingSecret=operator-creds," +
		"temporal.address=temporal.example.com:7233,temporal.namespace=prod,temporal.tls.enabled=true,temporal.tls.secretName=temporal-client," +
		"temporal.apiKey.secretName=temporal-key,temporal.grpcCompression=gzip",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			assert.NotContains(t, objs, "Secret/qm-quartermaster-osb", "no generated Secret")
			assert.NotContains(t, objs, "Secret/qm-quartermaster-admin")
			api := podSpec(t, objs["Deployment/qm-quartermaster-api"])
			env := envOf(api["containers"].([]any)[0].(map[string]any))
			assert.Contains(t, env, "QM_OSB_PASSWORD<-platform-creds/password")
			assert.Contains(t, env, "QM_ADMIN_PASSWORD<-operator-creds/password")
			worker := podSpec(t, objs["Deployment/qm-quartermaster-worker"])
			env = envOf(worker["containers"].([]any)[0].(map[string]any))
			for _, want := range []string{"TEMPORAL_ADDRESS=temporal.example.com:7233", "TEMPORAL_NAMESPACE=prod", "TEMPORAL_TLS=true",
				"TEMPORAL_TLS_CLIENT_CERT_PATH=/etc/temporal-tls/tls.crt", "TEMPORAL_API_KEY<-temporal-key/api-key", "QM_TEMPORAL_GRPC_COMPRESSION=gzip"} {
				assert.Contains(t, env, want)
			}
			assert.Contains(t, worker["volumes"], map[string]any{"name": "temporal-tls", "secret": map[string]any{"secretName": "temporal-client"}})
		}},
	{name: "API over TLS, a private Temporal CA, network policies", set: "api.tls.enabled=true,api.tls.secretName=qm-api-tls," +
		"api.tls.clientCASecretName=platform-ca,temporal.tls.enabled=true,temporal.tls.caSecretName=temporal-ca,networkPolicy.enabled=true," +
		"networkPolicy.osbFrom[0].namespaceSelector.matchLabels.platform=cf,networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			api := podSpec(t, objs["Deployment/qm-quartermaster-api"])
			c := api["containers"].([]any)[0].(map[string]any)
			for _, arg := range []string{"--tls-cert-file=/etc/qm-tls/tls.crt", "--tls-key-file=/etc/qm-tls/tls.key",
				"--tls-client-ca-file=/etc/qm-client-ca/ca.crt", "--admin-listen=:8081", "--metrics-addr=:9090"} {
				assert.Contains(t, c["args"], arg)
			}
			assert.Equal(t, "HTTPS", dig(c, "readinessProbe", "httpGet", "scheme"), "the probes speak TLS")
			assert.Contains(t, api["volumes"], map[string]any{"name": "api-tls", "secret": map[string]any{"secretName": "qm-api-tls"}})
			assert.Contains(t, api["volumes"], map[string]any{"name": "api-client-ca", "secret": map[string]any{"secretName": "platform-ca",
				"items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}}}})
			worker := podSpec(t, objs["Deployment/qm-quartermaster-worker"])
			wc := worker["containers"].([]any)[0].(map[string]any)
			assert.Contains(t, envOf(wc), "TEMPORAL_TLS_SERVER_CA_CERT_PATH=/etc/temporal-ca/ca.crt", "a private CA verifies Temporal")
			assert.Contains(t, wc["volumeMounts"], map[string]any{"name": "temporal-ca", "mountPath": "/etc/temporal-ca", "readOnly": true})

			osb := objs["NetworkPolicy/qm-quartermaster-api"]
			require.NotNil(t, osb)
			ingress := dig(osb.Object, "spec", "ingress").([]any)
			require.Len(t, ingress, 2, "the OSB port from the platforms, the metrics from Prometheus; no admin rule admits everyone")
			assert.Equal(t, []any{map[string]any{"port": "http", "protocol": "TCP"}}, dig(ingress[0].(map[string]any), "ports"))
			assert.Equal(t, "cf", dig(ingress[0].(map[string]any)["from"].([]any)[0].(map[string]any), "namespaceSelector", "matchLabels", "platform"))
			assert.Equal(t, []any{map[string]any{"port": "metrics", "protocol": "TCP"}}, dig(ingress[1].(map[string]any), "ports"))
			worker = objs["NetworkPolicy/qm-quartermaster-worker"].Object
			assert.Len(t, dig(worker, "spec", "ingress").([]any), 1, "the worker: its metrics only")
		}},
	{name: "encrypted payloads and the codec server", set: "payloadEncryption.enabled=true,payloadEncryption.secretName=qm-payload-keys," +
		"payloadEncryption.keyID=2026-11,codecServer.enabled=true,codecServer.tokenSecretName=codec-token",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			for _, d := range []string{"api", "watcher", "worker", "codec-server"} {
				pod := podSpec(t, objs["Deployment/qm-quartermaster-"+d])
				c := pod["containers"].([]any)[0].(map[string]any)
				assert.Contains(t, envOf(c), "QM_PAYLOAD_KEYS_DIR=/etc/qm-payload-keys", d)
				assert.Contains(t, envOf(c), "QM_PAYLOAD_KEY_ID=2026-11", d)
				assert.Contains(t, pod["volumes"], map[string]any{"name": "payload-keys", "secret": map[string]any{"secretName": "qm-payload-keys"}}, d)
			}
			codec := podSpec(t, objs["Deployment/qm-quartermaster-codec-server"])["containers"].([]any)[0].(map[string]any)
			assert.Equal(t, []any{"codec-server", "--listen=:8888", "--ui-origin=http://localhost:8233", "--log-level=info"}, codec["args"])
			assert.Contains(t, envOf(codec), "QM_CODEC_SERVER_TOKEN<-codec-token/token")
			assert.Contains(t, objs, "Service/qm-quartermaster-codec-server")
			assert.Contains(t, objs, "ServiceAccount/qm-quartermaster-codec-server")
		}},
	{name: "autoscaled workers", set: "worker.autoscaling.enabled=true,worker.autoscaling.maxReplicas=6,metrics.serviceMonitor.enabled=true," +
		"worker.scheduler=capacity,metrics.dashboard.enabled=true,metrics.prometheusRule.enabled=true",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			worker := podSpec(t, objs["Deployment/qm-quartermaster-worker"])
			assert.Contains(t, worker["containers"].([]any)[0].(map[string]any)["args"], "--scheduler=capacity")
			hpa := objs["HorizontalPodAutoscaler/qm-quartermaster-worker"]
			require.NotNil(t, hpa)
			assert.EqualValues(t, 6, dig(hpa.Object, "spec", "maxReplicas"))
			assert.Nil(t, dig(objs["Deployment/qm-quartermaster-worker"].Object, "spec", "replicas"), "the autoscaler owns the replicas")
			assert.Contains(t, objs, "ServiceMonitor/qm-quartermaster")
			assert.Contains(t, objs, "ConfigMap/qm-quartermaster-dashboard")
			assert.Contains(t, objs, "PrometheusRule/qm-quartermaster")
		}},
	{name: "builds promoted by hand", set: "image.tag=1.4.2,worker.versioning.promote=manual,worker.versioning.drainTimeoutSeconds=120",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			worker := podSpec(t, objs["Deployment/qm-quartermaster-worker"])
			c := worker["containers"].([]any)[0].(map[string]any)
			assert.Contains(t, envOf(c), "QM_BUILD_ID=1.4.2", "the build is the image's tag")
			assert.NotContains(t, strings.Join(envOf(c), " "), "QM_RELEASE_REVISION", "no worker promotes its build")
			assert.Contains(t, c["args"], "--drain-timeout=120s")
			assert.EqualValues(t, 180, worker["terminationGracePeriodSeconds"])
			assert.NotContains(t, testenv.RenderChartHooks(t, load(t), "default", values(t, "worker.versioning.promote=manual")),
				"Job/qm-quartermaster-builds-rollback", "the operator routes")
		}},
	{name: "unversioned workers", set: "worker.versioning.enabled=false",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			worker := podSpec(t, objs["Deployment/qm-quartermaster-worker"])
			c := worker["containers"].([]any)[0].(map[string]any)
			assert.NotContains(t, strings.Join(envOf(c), " "), "QM_BUILD_ID")
			assert.EqualValues(t, 60, worker["terminationGracePeriodSeconds"])
		}},
	{name: "custom scheduler and samples", set: "schedulerName=zone-aware,sampleCatalog={key-value-store,key-value-store-class},catalogNamespace=brokers",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			for _, d := range []string{"api", "watcher", "worker"} {
				assert.Equal(t, "zone-aware", podSpec(t, objs["Deployment/qm-quartermaster-"+d])["schedulerName"], d)
			}
			plan := objs["SFPlan/key-value-store-small"]
			require.NotNil(t, plan, "the sample plan is installed")
			assert.Equal(t, "brokers", plan.GetNamespace())
			class := objs["ServiceClass/key-value-stores"]
			require.NotNil(t, class, "the sample class is installed")
			assert.Equal(t, "brokers", class.GetNamespace(), "beside the instances it registers")
			assert.Equal(t, "brokers", objs["Role/qm-quartermaster-api"].GetNamespace(), "the API's role is in the catalog namespace")
		}},
	{name: "watcher shards", set: "watcher.shards=3",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			assert.NotContains(t, objs, "Deployment/qm-quartermaster-watcher", "a Deployment per shard instead")
			selectors := map[string]bool{}
			for shard := range 3 {
				d := objs[fmt.Sprintf("Deployment/qm-quartermaster-watcher-shard-%d", shard)]
				require.NotNil(t, d, "shard %d's Deployment", shard)
				assert.EqualValues(t, 2, dig(d.Object, "spec", "replicas"), "a leader and a standby per shard")
				c := podSpec(t, d)["containers"].([]any)[0].(map[string]any)
				assert.Contains(t, c["args"], fmt.Sprintf("--shard=%d/3", shard))
				sel := dig(d.Object, "spec", "selector", "matchLabels").(map[string]any)
				assert.Equal(t, strconv.Itoa(shard), sel["quartermaster.io/watcher-shard"])
				assert.Equal(t, sel["quartermaster.io/watcher-shard"], dig(d.Object, "spec", "template", "metadata", "labels", "quartermaster.io/watcher-shard"))
				selectors[fmt.Sprint(sel)] = true
			}
			assert.Len(t, selectors, 3, "no shard's Deployment selects another's pods")
		}},
}

// TestChartLints: `helm lint` finds nothing, with each variation's values.
func TestChartLints(t *testing.T) {
	for _, v := range variations {
		t.Run(v.name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir, values(t, v.set), "default", testenv.ChartKubeVersion)
			for _, m := range linter.Messages {
				assert.Less(t, m.Severity, support.WarningSev, "helm lint: %s", m)
			}
		})
	}
}

// TestChartRenders: `helm template` renders each variation with the
// standard labels on every object, and the output applies to the real API
// server (server-side dry run), CRDs included.
func TestChartRenders(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ch := load(t)
	for _, v := range variations {
		t.Run(v.name, func(t *testing.T) {
			ns := kube.Namespace(t)
			objs := render(t, ch, ns, v.set)
			v.check(t, objs)
			for key, obj := range objs {
				obj = obj.DeepCopy()
				labels := obj.GetLabels()
				if obj.GetKind() != "CustomResourceDefinition" {
					for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
						assert.NotEmpty(t, labels[l], "%s has label %s", key, l)
					}
				}
				if obj.GetKind() == "ServiceMonitor" || obj.GetKind() == "PrometheusRule" {
					continue // the Prometheus Operator's CRDs are not on this cluster
				}
				if obj.GetNamespace() != "" {
					obj.SetNamespace(ns) // catalogNamespace=brokers: into the test's namespace
				}
				err := kube.Client.Patch(context.Background(), obj, ctrlclient.Apply, ctrlclient.DryRunAll,
					ctrlclient.FieldOwner("helm-test"), ctrlclient.ForceOwnership)
				assert.NoError(t, err, "server-side dry run of %s", key)
			}
		})
	}
}

// TestChartInstalls: `helm install` into the embedded cluster, and the
// three Deployments become available on the simulated nodes. The CRD hook
// Job runs before them. A `helm upgrade` runs the hook again and keeps
// the generated OSB and admin credentials: platforms registered with
// them go on working.
func TestChartInstalls(t *testing.T) {
	kube := testenv.Kubernetes(t)
	ns := kube.Namespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kube.Kubeconfig, 0o600))
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := &action.Configuration{}
	require.NoError(t, cfg.Init(flags, ns, "secret", t.Logf))

	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = "qm", ns
	install.Wait, install.Timeout = true, 3*time.Minute
	rel, err := install.Run(load(t), values(t, "sampleCatalog={key-value-store}"))
	require.NoError(t, err, "helm install")
	assert.Contains(t, rel.Info.Notes, "get secret qm-quartermaster-osb")

	for _, name := range []string{"qm-quartermaster-api", "qm-quartermaster-watcher", "qm-quartermaster-worker"} {
		var d appsv1.Deployment
		require.NoError(t, kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &d))
		assert.EqualValues(t, 2, d.Status.AvailableReplicas, "%s is available", name)
	}
	crdsHookRan(t, rel)
	creds := credentials(t, kube, ns)
	require.Len(t, creds, 2, "the OSB and admin credentials")

	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = ns
	upgrade.Wait, upgrade.Timeout = true, 3*time.Minute
	rel, err = upgrade.Run("qm", load(t), values(t, "sampleCatalog={key-value-store},logLevel=debug"))
	require.NoError(t, err, "helm upgrade")
	assert.Equal(t, 2, rel.Version)
	crdsHookRan(t, rel)
	assert.Equal(t, creds, credentials(t, kube, ns), "helm upgrade keeps the generated credentials")
	uninstall := action.NewUninstall(cfg)
	uninstall.Wait, uninstall.Timeout = true, 2*time.Minute
	_, err = uninstall.Run("qm")
	require.NoError(t, err, "helm uninstall")
	var d appsv1.Deployment
	err = kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "qm-quartermaster-api"}, &d)
	assert.True(t, ctrlclient.IgnoreNotFound(err) == nil && err != nil, "uninstall removes the Deployments: %v", err)
}

// crdsHookRan checks that the release's CRD hook Job ran and succeeded.
func crdsHookRan(t *testing.T, rel *release.Release) {
	t.Helper()
	for _, h := range rel.Hooks {
		if h.Kind == "Job" && h.Name == "qm-quartermaster-crds" {
			assert.Equal(t, release.HookPhaseSucceeded, h.LastRun.Phase, "the CRD hook Job of release %d", rel.Version)
			return
		}
	}
	t.Errorf("release %d has no CRD hook Job", rel.Version)
}

// credentials are the generated Secrets' username and password, by name.
func credentials(t *testing.T, kube *testenv.Cluster, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range []string{"qm-quartermaster-osb", "qm-quartermaster-admin"} {
		var secret corev1.Secret
		require.NoError(t, kube.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &secret))
		require.Len(t, secret.Data["password"], 32, "%s has a generated password", name)
		out[name] = string(secret.Data["username"]) + ":" + string(secret.Data["password"])
	}
	return out
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	return testenv.QMChart(t)
}

func values(t *testing.T, set string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if set != "" {
		require.NoError(t, strvals.ParseInto(set, vals))
	}
	return vals
}

// render is `helm template qm deploy/chart/quartermaster --include-crds`,
// keyed by "Kind/name".
func render(t *testing.T, ch *chart.Chart, ns, set string) map[string]*unstructured.Unstructured {
	t.Helper()
	return testenv.RenderChart(t, ch, ns, values(t, set))
}

func podSpec(t *testing.T, deploy *unstructured.Unstructured) map[string]any {
	t.Helper()
	require.NotNil(t, deploy)
	spec, found, err := unstructured.NestedMap(deploy.Object, "spec", "template", "spec")
	require.True(t, found && err == nil, "%s has a pod template", deploy.GetName())
	return spec
}

// envOf writes a container's variables as NAME=value or NAME<-secret/key.
func envOf(container map[string]any) []string {
	var out []string
	for _, e := range container["env"].([]any) {
		e := e.(map[string]any)
		if ref, ok := dig(e, "valueFrom", "secretKeyRef").(map[string]any); ok {
			out = append(out, e["name"].(string)+"<-"+ref["name"].(string)+"/"+ref["key"].(string))
			continue
		}
		out = append(out, e["name"].(string)+"="+e["value"].(string))
	}
	return out
}

func dig(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}
