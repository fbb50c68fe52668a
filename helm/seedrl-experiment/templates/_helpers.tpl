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
The Experiment's spec: values.spec as it is. The two fields the cluster changes after the
install, spec.actors.replicas (`kubectl scale`, an HPA: the CRD's scale subresource) and
spec.suspend (`kubectl patch`), are in values.yaml only as comments: left out, they are never
rendered, so no revision helm records holds them and no upgrade, rollback or `helm template`
(Argo CD) applies them; the CRD's defaults apply at creation. A values file that sets one
makes helm their owner, as for any field ("seedrl-experiment.ownedByOthers").
*/}}
{{- define "seedrl-experiment.spec" -}}
{{- $spec := deepCopy (.Values.spec | default dict) }}
{{- include "seedrl-experiment.ownedByOthers" (list . $spec) }}
{{- toYaml $spec }}
{{- end }}

{{/*
Fails an upgrade whose values set spec.actors.replicas or spec.suspend to other than the live
Experiment's value when another field manager set it (kubectl scale, an HPA, kubectl patch):
applied with server-side apply (Helm 4) that is a conflict the API server refuses with no
hint of the cure; forced (or client-side) it would revert the scale or the suspend. The
message names the field, both values and the manager. Where lookup is empty (helm template,
a rollback, a client-side dry run) there is nothing to compare.
*/}}
{{- define "seedrl-experiment.ownedByOthers" -}}
{{- $ := index . 0 }}
{{- $spec := index . 1 }}
{{- if $.Release.IsUpgrade }}
{{- $live := lookup "seedrl.dev/v1alpha1" "Experiment" $.Release.Namespace (include "seedrl-experiment.name" $) }}
{{- if $live }}
{{- $fields := list (list "spec.actors.replicas" (dig "actors" "replicas" nil $spec) (dig "spec" "actors" "replicas" nil $live) (list "f:spec" "f:actors" "f:replicas") "kubectl scale experiment/NAME --replicas=N")
  (list "spec.suspend" (dig "suspend" nil $spec) (dig "spec" "suspend" nil $live) (list "f:spec" "f:suspend") `kubectl patch experiment/NAME --type=merge -p '{"spec":{"suspend":false}}'`) }}
{{- range $field := $fields }}
{{- $path := index $field 0 }}{{- $wanted := index $field 1 }}{{- $current := index $field 2 }}{{- $keys := index $field 3 }}
{{- if and (not (kindIs "invalid" $wanted)) (ne (toJson $wanted) (toJson $current)) }}
{{- $others := list }}
{{- range $m := $live.metadata.managedFields | default list }}
{{- $owned := $m.fieldsV1 | default dict }}
{{- $found := true }}
{{- range $k := $keys }}
{{- if and $found (kindIs "map" $owned) (hasKey $owned $k) }}{{- $owned = index $owned $k }}{{- else }}{{- $found = false }}{{- end }}
{{- end }}
{{- if and $found (ne $m.manager "helm") }}
{{- $others = append $others (printf "%s%s" $m.manager (ternary (printf " (%s)" ($m.subresource | default "")) "" (not (empty $m.subresource)))) }}
{{- end }}
{{- end }}
{{- if $others }}
{{- fail (printf "%s: the values set %s, but the live Experiment has %s, set by %s. Remove %s from the values to leave it to the cluster (%s), or set it to %s" $path (toJson $wanted) (toJson $current) (join ", " $others) $path (index $field 4) (toJson $current)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
