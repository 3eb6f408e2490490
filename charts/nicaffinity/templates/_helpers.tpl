{{/* Labels Helm adds to every object besides those the manifests carry. */}}
{{- define "nicaffinity.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* An image reference: registry/component:tag. */}}
{{- define "nicaffinity.image" -}}
{{- $ := index . 0 -}}
{{ $.Values.image.registry }}/{{ index . 1 }}:{{ $.Values.image.tag | default $.Chart.AppVersion }}
{{- end }}

{{/* The service-account user names the admission policies match. */}}
{{- define "nicaffinity.exporterUser" -}}
system:serviceaccount:{{ .Values.namespaces.node }}:topology-exporter
{{- end }}
{{- define "nicaffinity.schedulerUser" -}}
system:serviceaccount:{{ .Values.namespaces.scheduler }}:nicaffinity-scheduler
{{- end }}
{{- define "nicaffinity.proxyUser" -}}
system:serviceaccount:{{ .Values.namespaces.node }}:allocation-proxy
{{- end }}

{{/* imagePullPolicy and imagePullSecrets, where set. */}}
{{- define "nicaffinity.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}
{{- define "nicaffinity.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
