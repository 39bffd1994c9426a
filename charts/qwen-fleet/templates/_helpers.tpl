{{/* Names, labels and the image reference, shared by every template. */}}

{{- define "qwen-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: "<release>-qwen-fleet", or just the release name when it already says qwen-fleet. */}}
{{- define "qwen-fleet.fullname" -}}
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

{{- define "qwen-fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "qwen-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qwen-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Never app.kubernetes.io/managed-by=qwen-fleet: that label marks the operator's own children. */}}
{{- define "qwen-fleet.labels" -}}
helm.sh/chart: {{ include "qwen-fleet.chart" . }}
{{ include "qwen-fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qwen-fleet
{{- end }}

{{- define "qwen-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qwen-fleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "qwen-fleet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespaces the operator watches (the schema rejects duplicates). */}}
{{- define "qwen-fleet.watchNamespaces" -}}
{{- .Values.watchNamespaces | join "," }}
{{- end }}

{{/* The Lease the operator's replicas elect their leader on. */}}
{{- define "qwen-fleet.leaseName" -}}
{{- printf "%s-leader" (include "qwen-fleet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
