{{/*
Named templates of the seedrl-experiment chart.
*/}}

{{/* The Experiment's name: values.name, or the release name. */}}
{{- define "seedrl-experiment.name" -}}
{{- default .Release.Name .Values.name }}
{{- end }}

{{/* chart-version, the value of the helm.sh/chart label. */}}
{{- define "seedrl-experiment.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of the Experiment: the user's labels, then the chart's (which win, so that helm can
always find what it installed).
*/}}
{{- define "seedrl-experiment.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (include "seedrl-experiment.chart" .)
  "app.kubernetes.io/name" "seedrl-experiment"
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/part-of" "seedrl"
  "app.kubernetes.io/managed-by" .Release.Service }}
{{- toYaml (merge $labels .Values.labels) }}
{{- end }}
