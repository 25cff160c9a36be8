{{/* The chart's name, overridable. */}}
{{- define "windlass.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; the release name alone when it already contains the chart's. */}}
{{- define "windlass.fullname" -}}
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

{{- define "windlass.selectorLabels" -}}
app.kubernetes.io/name: {{ include "windlass.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "windlass.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "windlass.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "windlass.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "windlass.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The ConfigMaps the host may read, grouped by namespace, as a dict namespace -> list of names
(JSON, since templates can only return strings): rbac.configMaps plus every plugin's configMap.
*/}}
{{- define "windlass.configMapsByNamespace" -}}
{{- $byNs := dict }}
{{- $refs := list }}
{{- range .Values.rbac.configMaps }}
{{- $refs = append $refs . }}
{{- end }}
{{- range .Values.plugins }}
{{- if .configMap }}
{{- $refs = append $refs .configMap }}
{{- end }}
{{- end }}
{{- range $refs }}
{{- $ns := default $.Release.Namespace .namespace }}
{{- $name := required "every ConfigMap reference needs a name" .name }}
{{- $names := get $byNs $ns | default list }}
{{- if not (has $name $names) }}
{{- $_ := set $byNs $ns (append $names $name) }}
{{- end }}
{{- end }}
{{- toJson $byNs }}
{{- end }}

{{/* The pull Secrets the host may read in its namespace (JSON list of names). */}}
{{- define "windlass.pullSecrets" -}}
{{- $names := list }}
{{- range .Values.rbac.pullSecrets }}
{{- $names = append $names . }}
{{- end }}
{{- range .Values.plugins }}
{{- if and .oci .oci.pullSecret }}
{{- $names = append $names .oci.pullSecret }}
{{- end }}
{{- end }}
{{- toJson ($names | uniq) }}
{{- end }}
