{{/* The chart's name, or nameOverride. */}}
{{- define "qm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name: release-chart, or fullnameOverride. */}}
{{- define "qm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "qm.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "qm.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The standard labels (Kubernetes' recommended labels, as Helm's own starter chart sets them). */}}
{{- define "qm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "qm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: quartermaster
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "qm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: call with (dict "root" $ "component" "api"). */}}
{{- define "qm.componentLabels" -}}
{{ include "qm.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "qm.componentSelector" -}}
{{ include "qm.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Name of a component's service account. */}}
{{- define "qm.serviceAccount" -}}
{{- if .root.Values.serviceAccount.create }}
{{- printf "%s-%s" (include "qm.fullname" .root) .component }}
{{- else }}
{{- required (printf "serviceAccount.names.%s is required when serviceAccount.create is false" .component) (get .root.Values.serviceAccount.names .component) }}
{{- end }}
{{- end }}

{{- define "qm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- /*
The worker deployment (Temporal's Worker Versioning) the release's workers
form, and this release's build in it: the image's tag unless set. A tag
that names other code over time cannot name a build.
*/ -}}
{{- define "qm.workerDeployment" -}}
{{ include "qm.fullname" . | replace "." "-" }}
{{- end }}

{{- define "qm.buildID" -}}
{{- $id := .Values.worker.versioning.buildID | default (.Values.image.tag | default .Chart.AppVersion) -}}
{{- if eq $id "latest" }}{{ fail "worker.versioning: the image tag \"latest\" names no one build; set worker.versioning.buildID, or a tag of its own per release" }}{{ end -}}
{{ $id }}
{{- end }}

{{- /*
A worker pod's grace: a versioned worker drains its pinned runs, then lets
its tasks in hand finish (--stop-timeout, 30 s), with room for both.
*/ -}}
{{- define "qm.workerGracePeriod" -}}
{{- if .Values.worker.versioning.enabled -}}
{{ add .Values.worker.versioning.drainTimeoutSeconds 60 }}
{{- else -}}
60
{{- end }}
{{- end }}

{{- define "qm.catalogNamespace" -}}
{{ .Values.catalogNamespace | default .Release.Namespace }}
{{- end }}

{{/* The trust boundary: the catalog namespace and the others the operator lists. */}}
{{- define "qm.catalogNamespaces" -}}
{{ prepend .Values.trustedNamespaces (include "qm.catalogNamespace" .) | uniq | join "," }}
{{- end }}

{{- define "qm.osbSecret" -}}
{{ .Values.credentials.osb.existingSecret | default (printf "%s-osb" (include "qm.fullname" .)) }}
{{- end }}

{{- define "qm.adminSecret" -}}
{{ .Values.credentials.admin.existingSecret | default (printf "%s-admin" (include "qm.fullname" .)) }}
{{- end }}

{{/* The Temporal client's environment configuration (go.temporal.io/sdk/contrib/envconfig). */}}
{{- define "qm.temporalEnv" -}}
- name: TEMPORAL_ADDRESS
  value: {{ required "temporal.address is required" .Values.temporal.address | quote }}
- name: TEMPORAL_NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
- name: QM_TEMPORAL_GRPC_COMPRESSION
  value: {{ .Values.temporal.grpcCompression | quote }}
{{- with .Values.temporal.tls }}
{{- if .enabled }}
- name: TEMPORAL_TLS
  value: "true"
{{- if .secretName }}
- name: TEMPORAL_TLS_CLIENT_CERT_PATH
  value: /etc/temporal-tls/tls.crt
- name: TEMPORAL_TLS_CLIENT_KEY_PATH
  value: /etc/temporal-tls/tls.key
{{- end }}
{{- if .caSecretName }}
- name: TEMPORAL_TLS_SERVER_CA_CERT_PATH
  value: /etc/temporal-ca/ca.crt
{{- end }}
{{- if .serverName }}
- name: TEMPORAL_TLS_SERVER_NAME
  value: {{ .serverName | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- include "qm.payloadEnv" . }}
{{- with .Values.temporal.apiKey }}
{{- if .secretName }}
- name: TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .secretName | quote }}, key: {{ .key | quote }}}
{{- end }}
{{- end }}
{{- end }}

{{/* The payload keys' environment (internal/codec), when payloads are encrypted. */}}
{{- define "qm.payloadEnv" -}}
{{- if .Values.payloadEncryption.enabled }}
- name: QM_PAYLOAD_KEYS_DIR
  value: /etc/qm-payload-keys
- name: QM_PAYLOAD_KEY_ID
  value: {{ required "payloadEncryption.keyID is required with payloadEncryption.enabled" .Values.payloadEncryption.keyID | quote }}
{{- end }}
{{- end }}

{{/* Volumes every pod has: a writable /tmp on the read-only root, and the Temporal client certificate. */}}
{{- define "qm.volumes" -}}
- name: tmp
  emptyDir: {sizeLimit: 256Mi}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.secretName }}
- name: temporal-tls
  secret: {secretName: {{ .Values.temporal.tls.secretName | quote }}}
{{- end }}
{{- if .Values.payloadEncryption.enabled }}
- name: payload-keys
  secret: {secretName: {{ required "payloadEncryption.secretName is required with payloadEncryption.enabled" .Values.payloadEncryption.secretName | quote }}}
{{- end }}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.caSecretName }}
- name: temporal-ca
  secret: {secretName: {{ .Values.temporal.tls.caSecretName | quote }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end }}

{{- define "qm.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.secretName }}
- name: temporal-tls
  mountPath: /etc/temporal-tls
  readOnly: true
{{- end }}
{{- if .Values.payloadEncryption.enabled }}
- name: payload-keys
  mountPath: /etc/qm-payload-keys
  readOnly: true
{{- end }}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.caSecretName }}
- name: temporal-ca
  mountPath: /etc/temporal-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* What every pod spec shares: call with (dict "root" $ "component" "api"). */}}
{{- define "qm.podCommon" -}}
serviceAccountName: {{ include "qm.serviceAccount" . }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.schedulerName }}
schedulerName: {{ . }}
{{- end }}
securityContext: {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .root.Values.topologySpread.enabled }}
topologySpreadConstraints:
{{- range list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - topologyKey: {{ . }}
    maxSkew: {{ $.root.Values.topologySpread.maxSkew }}
    whenUnsatisfiable: {{ $.root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels: {{- include "qm.componentSelector" $ | nindent 8 }}
{{- end }}
{{- end }}
volumes: {{- include "qm.volumes" .root | nindent 2 }}
{{- if and (eq .component "api") .root.Values.api.tls.enabled }}
  - name: api-tls
    secret: {secretName: {{ required "api.tls.secretName is required with api.tls.enabled" .root.Values.api.tls.secretName | quote }}}
  {{- with .root.Values.api.tls.clientCASecretName }}
  - name: api-client-ca
    secret: {secretName: {{ . | quote }}, items: [{key: ca.crt, path: ca.crt}]}
  {{- end }}
{{- end }}
{{- end }}

{{/* The names of the chart's CustomResourceDefinitions, read from crds/, as a YAML list. */}}
{{- define "qm.crdNames" -}}
{{- $names := list }}
{{- range $path, $_ := .Files.Glob "crds/*.yaml" }}
{{- $names = append $names (get (get ($.Files.Get $path | fromYaml) "metadata") "name") }}
{{- end }}
{{- toYaml $names }}
{{- end }}
