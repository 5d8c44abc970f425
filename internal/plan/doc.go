// Package plan renders the templates of an SFPlan for one instance or
// binding. It is the one place that decides what a template sees, and this
// page is the answer to "what can my template see?". It does no Temporal
// work and reads nothing from the API server: the activities load the
// objects, call it, and apply what it returns.
//
// # Templates
//
// An SFPlan has at most one template per action: provision (also rendered
// for an update), bind, unbind, sources and status. A template's body is
// spec.templates[].content, or contentEncoded (base64), or for helm a url:
//
//   - gotemplate: Go text/template, from content, contentEncoded or url.
//   - helm: a chart archive (.tgz) from contentEncoded or url.
//
// A url is an http or https url (the CRD admits no other), fetched by the
// worker's Fetcher within its bounds (the worker's --chart-url-allow,
// 10 MiB, 30 s: a host not allowed or a body too large fails the
// operation, other fetch errors are retried). The body is kept per
// plan generation, so every render of one plan version sees the same body
// and a change to the plan fetches again; the cache lives in the worker's
// memory, so a restarted worker fetches again too.
//
// provision, bind and unbind render Kubernetes objects, one per YAML
// document; sources renders a map from a key to {apiVersion, kind, name,
// namespace}; status renders a map from an operation to
// {state, description, error, dashboardUrl, instanceUsable,
// updateRepeatable, metadata, response}. A provision's or an update's
// metadata, {labels, attributes} with string values, is the instance's OSB
// metadata: the OSB API returns it with the operation and in GET of the
// instance. A bind's response, an object or a JSON
// string, is OSB's: credentials, endpoints ({host, ports, protocol}),
// volume_mounts, syslog_drain_url, route_service_url and metadata
// ({expires_at, renew_before}); a field of the wrong shape is a template
// error that names it.
//
// Output is read as the Service Fabrik inter-operator reads it, so that its
// plans run unchanged (docs/plans.md lists where the two differ): a source
// whose name is empty is skipped; only the running operation's section of
// the status output is read (an update's, else the provision's), and only a
// bind that succeeded reads its response. What is ignored but likely a
// mistake (a field no source has; an unnamed source of a binding's
// operation) comes back as a warning (SourceList.Warnings). A helm chart may
// serve as sources, status or clusterSelector: the file named after the
// action (templates/status.yaml) is read, or the chart's only file.
//
// # Variables
//
// Every value is JSON-shaped: maps, lists, strings, numbers and booleans.
//
//	.service    the SFService, as the API server returns it (apiVersion, kind, metadata, spec, status)
//	.plan       the SFPlan
//	.instance   the SFServiceInstance; absent when unbinding from an instance already deleted
//	.binding    the SFServiceBinding, for bind and unbind, and for status and sources of a binding
//	.registry   the registry of the instance or binding: every key but the reserved ones
//	            (namespace, instance-id, binding-id, service-id, plan-id, and what templates stored)
//	.cluster    the SFCluster the instance is scheduled on: its name, labels and spec, which an
//	            operator registered (not its status, which changes with every probe):
//	            {apiVersion: resource.servicefabrik.io/v1alpha1, kind: SFCluster,
//	             metadata: {name, labels}, spec: {secretRef, schedulingLimitPercentage, totalCapacity, ...}};
//	            for the cluster Quartermaster runs in (no spec.clusterId, or "1" as in the
//	            inter-operator), its name alone: {..., metadata: {name: "1"}}
//	.predecessor  for the bind and status of a binding that rotates another (its
//	            predecessorBinding), while the predecessor exists: {binding: the predecessor's
//	            SFServiceBinding, registry: its registry, credentialKeys: the sorted keys of its
//	            credentials, not their values}. A plan keeps what it needs of it in the new
//	            binding's registry ({{ setRegistry "user" .predecessor.registry.user }}), since
//	            the predecessor may be unbound before the new binding's status is read again.
//	.<key>      for status, bind and unbind: each object the sources template names, under its
//	            key, as the API server returns it; absent while it does not exist (test with `with`)
//
// The sources template itself sees every variable but the sources.
//
// # Functions (gotemplate)
//
//   - sprig's functions, less env, expandenv and getHostByName: a template
//     reads neither the worker's environment nor the network;
//
//   - b64enc, b64dec, toJson (marshalJSON), fromJson (unmarshalJSON),
//     toYaml, fromYaml and toToml, which fail the render on a bad value;
//
//   - the registry's, which keep what they make so that a retry or an update
//     renders the same values:
//
//     {{ registry "key" }}                      a stored value (not a reserved key)
//     {{ setRegistry "key" value }}             stores value, renders nothing
//     {{ generatePassword "key" 32 }}           letters and digits; a dictionary may follow
//     {{ generatePrivateKey "key" "rsa" 2048 }} rsa, ec (256, 384, 521) or ed25519; PKCS#8 PEM
//     {{ generateCertificate "key" (dict ...) }} a certificate signed by a stored CA or itself
//
// # Helm charts
//
// A chart is rendered with Helm's engine and Helm's own functions (sprig,
// include, tpl, required, ...); nothing is installed, and the objects are
// applied like those of a gotemplate. Its .Values are the chart's defaults,
// overridden by the plan's spec.context, overridden by the request's
// parameters that the plan's schema declares, at the paths its
// x-quartermaster-values-path keywords map them to (parameters.ChartValues;
// what it does not declare stays in .Values.instance.spec.parameters for
// the chart to read if it will), with the variables above beside them (.Values.instance,
// .Values.plan, .Values.registry, .Values.cluster, ...). .Release.Name is the
// instance's or binding's name, .Release.Namespace its namespace, and
// .Release.IsUpgrade is set for an update. The registry's functions are not
// available in a chart: a chart reads stored values from .Values.registry.
//
// # Errors
//
// A template that does not parse or render, output that is not what the
// action needs, or a body that cannot be read is a *TemplateError: the same
// render fails again, and the operation fails with its message, which names
// the action and, for a gotemplate, the line.
package plan
