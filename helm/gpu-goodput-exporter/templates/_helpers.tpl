{{/* Chart name, overridable. */}}
{{- define "gge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release already contains the chart name. */}}
{{- define "gge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "gge.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-goodput-exporter
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* DCGM runs inside the pod: needs the -dcgm image, uid 0 and SYS_ADMIN. */}}
{{- define "gge.dcgmEmbedded" -}}
{{- if and (eq .Values.profiling.mode "dcgm") .Values.profiling.dcgm.embedded }}true{{ end }}
{{- end }}

{{/* Needs uid 0: embedded DCGM, or the kubelet's root-only pod-resources socket. */}}
{{- define "gge.needsRoot" -}}
{{- if or (include "gge.dcgmEmbedded" .) .Values.kubernetes.attribution.enabled (include "gge.jobEnviron" .) }}true{{ end }}
{{- end }}

{{/* Job variables read from /proc/PID/environ: needs the host's PIDs and SYS_PTRACE. */}}
{{- define "gge.jobEnviron" -}}
{{- if and .Values.jobs.readEnviron .Values.kubernetes.hostPID }}true{{ end }}
{{- end }}

{{- define "gge.hpcJobMappingMount" -}}/var/run/goodput/hpc-job-mapping{{- end }}

{{- define "gge.image" -}}
{{- $tag := .Values.image.tag }}
{{- if not $tag }}
{{- $tag = .Chart.AppVersion }}
{{- if eq .Values.profiling.mode "dcgm" }}
{{- $tag = printf "%s-dcgm" $tag }}
{{- end }}
{{- end }}
{{- $repo := required "image.repository is required: no image is published, build one (make image) and push it to your registry, then --set image.repository=<registry>/gpu-goodput-exporter (docs/install.md)" .Values.image.repository }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repo $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{- define "gge.configDir" -}}/etc/gpu-goodput-exporter{{- end }}
{{- define "gge.webConfigDir" -}}/etc/gpu-goodput-exporter/web{{- end }}
{{- define "gge.tlsDir" -}}/etc/gpu-goodput-exporter/tls{{- end }}
{{- define "gge.podResourcesMount" -}}/var/lib/kubelet/pod-resources{{- end }}
{{- define "gge.deviceCheckpointMount" -}}/var/lib/kubelet/device-plugins{{- end }}

{{/* Web-config Secret name (rendered or existing). */}}
{{- define "gge.webConfigSecret" -}}
{{- default (printf "%s-web-config" (include "gge.fullname" .)) .Values.webConfig.existingSecret }}
{{- end }}

{{- define "gge.tlsOn" -}}
{{- if and .Values.webConfig.enabled .Values.webConfig.tls.enabled }}true{{ end }}
{{- end }}

{{/* The daemon's config file: keys the chart owns, then `config` merged over them. */}}
{{- define "gge.configFile" -}}
{{- $cfg := dict
  "listen" (printf ":%d" (int .Values.exporter.port))
  "interval" .Values.exporter.interval
  "log_format" .Values.exporter.logFormat
  "log_level" .Values.exporter.logLevel
  "collectors" .Values.exporter.collectors
  "extended_metrics" .Values.exporter.extendedMetrics
  "debug_state" .Values.exporter.debugState
  "profiling" (dict "mode" .Values.profiling.mode)
  "kubernetes" (dict
      "enabled" .Values.kubernetes.attribution.enabled
      "kubelet_socket" (printf "%s/kubelet.sock" (include "gge.podResourcesMount" .))
      "processes" .Values.kubernetes.hostPID
      "device_checkpoint" (printf "%s/kubelet_internal_checkpoint" (include "gge.deviceCheckpointMount" .)))
  "jobs" (dict
      "processes" .Values.kubernetes.hostPID
      "environ" (eq (include "gge.jobEnviron" .) "true"))
  "serving" (dict "targets" .Values.serving.targets)
}}
{{- if .Values.jobs.hpcJobMappingDir }}
{{- $_ := set $cfg.jobs "hpc_job_mapping_dir" (include "gge.hpcJobMappingMount" .) }}
{{- end }}
{{- if include "gge.dcgmEmbedded" . }}
{{- $_ := set $cfg.profiling "dcgm_host_engine" "embedded" }}
{{- end }}
{{- if .Values.serving.discovery.enabled }}
{{- $_ := set $cfg.serving "discover_pods" true }}
{{- end }}
{{- if .Values.kubernetes.podLabels.enabled }}
{{- $_ := set $cfg.kubernetes "pod_labels" true }}
{{- end }}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy .Values.config) }}
{{- toYaml $cfg }}
{{- end }}

{{/* Scheme and TLS settings shared by the ServiceMonitor and the PodMonitor. */}}
{{- define "gge.scrapeEndpoint" -}}
{{- $m := .monitor -}}
path: /metrics
{{- /* TLS on the exporter forces https; otherwise the monitor's own setting. */}}
scheme: {{ ternary "https" $m.scheme (eq .tls "true") }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $relabel := list }}
{{- /* The target labels Prometheus derives from the exporter's own pod would land on every
series that has no workload labels of its own (honorLabels keeps the exporter's), naming the
exporter pod as if it were the workload. Dropped (or renamed exporter_*) first, so the user's
relabelings still have the last word. */}}
{{- if eq $m.exporterPodLabels "rename" }}
{{- range $l := list "namespace" "pod" "container" }}
{{- $relabel = append $relabel (dict "action" "replace" "sourceLabels" (list $l) "targetLabel" (printf "exporter_%s" $l)) }}
{{- end }}
{{- end }}
{{- if has $m.exporterPodLabels (list "drop" "rename") }}
{{- $relabel = append $relabel (dict "action" "labeldrop" "regex" "namespace|pod|container") }}
{{- end }}
{{- $relabel = concat $relabel $m.relabelings }}
{{- with $relabel }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Whether the exporter talks to the API server (needs the token and RBAC). */}}
{{- define "gge.apiAccess" -}}
{{- if or .Values.serving.discovery.enabled .Values.kubernetes.podLabels.enabled }}true{{ end }}
{{- end }}
