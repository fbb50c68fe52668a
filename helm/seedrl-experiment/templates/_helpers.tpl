{{/*
Named templates of the seedrl-experiment chart.

An Experiment file (apiVersion, kind, metadata, spec) is a values file of this chart, next to
the chart's own top-level name, labels and annotations. Where both say something,
metadata.* wins: the same file must name the same Experiment whether `kubectl apply`, `seedrl
train` or helm reads it.
*/}}

{{/* The Experiment's name: metadata.name, else values.name, else the release name. */}}
{{- define "seedrl-experiment.name" -}}
{{- $meta := .Values.metadata | default dict }}
{{- coalesce $meta.name .Values.name .Release.Name }}
{{- end }}

{{/*
The Experiment's namespace: the release's. A metadata.namespace naming another one fails
rendering rather than being ignored: the file says where its Experiment belongs, and an
install without the matching -n would otherwise put it somewhere else, unnoticed (helm keeps
the release, and looks the Experiment up, in the release's namespace).
*/}}
{{- define "seedrl-experiment.namespace" -}}
{{- $meta := .Values.metadata | default dict }}
{{- if and $meta.namespace (ne $meta.namespace .Release.Namespace) }}
{{- fail (printf "metadata.namespace is %s but the release's namespace is %s: install the release with -n %s (helm puts the Experiment in the release's namespace), or leave metadata.namespace out" $meta.namespace .Release.Namespace $meta.namespace) }}
{{- end }}
{{- .Release.Namespace }}
{{- end }}

{{/* chart-version, the value of the helm.sh/chart label. */}}
{{- define "seedrl-experiment.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of the Experiment: values.labels, metadata.labels over them, then the chart's over
both (so that helm can always find what it installed).
*/}}
{{- define "seedrl-experiment.labels" -}}
{{- $meta := .Values.metadata | default dict }}
{{- $labels := dict
  "helm.sh/chart" (include "seedrl-experiment.chart" .)
  "app.kubernetes.io/name" "seedrl-experiment"
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/part-of" "seedrl"
  "app.kubernetes.io/managed-by" .Release.Service }}
{{- toYaml (merge $labels ($meta.labels | default dict) (.Values.labels | default dict)) }}
{{- end }}

{{/* Annotations of the Experiment: metadata.annotations over values.annotations. */}}
{{- define "seedrl-experiment.annotations" -}}
{{- $meta := .Values.metadata | default dict }}
{{- $annotations := merge (dict) ($meta.annotations | default dict) (.Values.annotations | default dict) }}
{{- if $annotations }}
{{- toYaml $annotations }}
{{- end }}
{{- end }}

{{/*
The Experiment's spec: values.spec, except the two fields the cluster changes after the
install, spec.actors.replicas (`kubectl scale`, an HPA: the CRD's scale subresource) and
spec.suspend (`kubectl patch`). On an upgrade whose Experiment exists they are the live
object's, so that helm applies what it finds: with server-side apply, which Helm 4 installs
with, applying the values' again would conflict with the manager that set them (or, forced,
revert the count and resume a suspended learner); with a client-side three-way merge it
would revert them. Where there is no live object (first install, helm template, a
client-side dry run) the values apply.
*/}}
{{- define "seedrl-experiment.spec" -}}
{{- $spec := deepCopy (.Values.spec | default dict) }}
{{- if .Release.IsUpgrade }}
{{- $live := lookup "seedrl.dev/v1alpha1" "Experiment" .Release.Namespace (include "seedrl-experiment.name" .) }}
{{- $liveSpec := dig "spec" (dict) $live }}
{{- if hasKey $liveSpec "suspend" }}
{{- $_ := set $spec "suspend" $liveSpec.suspend }}
{{- end }}
{{- $liveActors := dig "actors" (dict) $liveSpec }}
{{- if hasKey $liveActors "replicas" }}
{{- $actors := get $spec "actors" | default dict }}
{{- $_ := set $actors "replicas" $liveActors.replicas }}
{{- $_ := set $spec "actors" $actors }}
{{- end }}
{{- end }}
{{- toYaml $spec }}
{{- end }}
