{{/*
Named templates of the seedrl-operator chart.
*/}}

{{/* The chart's short name: nameOverride or the chart name, cut to a DNS label. */}}
{{- define "seedrl-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name. The release name alone when it already contains the chart
name (so `helm install seedrl-operator ...` does not give seedrl-operator-seedrl-operator).
*/}}
{{- define "seedrl-operator.fullname" -}}
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

{{/*
Name of a cluster-scoped object (ClusterRole, ClusterRoleBinding): prefixed by the release
namespace, because two releases of the same name in different namespaces would otherwise share
it. The suffix names the object's purpose.
*/}}
{{- define "seedrl-operator.clusterName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $base := printf "%s-%s" $root.Release.Namespace (include "seedrl-operator.fullname" $root) }}
{{- printf "%s-%s" ($base | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" }}
{{- end }}

{{/*
The conversion webhook's Service, which the CRD's clientConfig names, and the Secret its
certificate is kept in (made and renewed by the operator, which also sets the CRD's caBundle).
*/}}
{{- define "seedrl-operator.webhookName" -}}
{{- printf "%s-webhook" (include "seedrl-operator.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}
{{- define "seedrl-operator.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "seedrl-operator.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{/* chart-version, the value of the helm.sh/chart label. */}}
{{- define "seedrl-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod; never change between upgrades. */}}
{{- define "seedrl-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "seedrl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "seedrl-operator.labels" -}}
helm.sh/chart: {{ include "seedrl-operator.chart" . }}
{{ include "seedrl-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: seedrl
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "seedrl-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "seedrl-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the ConfigMap holding the price-table override (values.prices). */}}
{{- define "seedrl-operator.pricesName" -}}
{{- printf "%s-prices" (include "seedrl-operator.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* Where the operator container mounts it; $SEEDRL_PRICES names this directory. */}}
{{- define "seedrl-operator.pricesDir" -}}
/etc/seedrl/prices
{{- end }}

{{/* The operator image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "seedrl-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespaces watched when watch.scope is "namespaces", as a YAML list. */}}
{{- define "seedrl-operator.watchNamespaces" -}}
{{- if .Values.watch.namespaces }}
{{- toYaml .Values.watch.namespaces }}
{{- else }}
{{- toYaml (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the operator watches every namespace. */}}
{{- define "seedrl-operator.clusterWide" -}}
{{- if eq .Values.watch.scope "cluster" }}true{{ end }}
{{- end }}

{{/*
The operator's arguments (python -m seedrl.service.operator's flags), derived from watch and operator,
then operator.extraArgs. No --namespace means every namespace.
*/}}
{{- define "seedrl-operator.args" -}}
{{- $args := list }}
{{- if not (include "seedrl-operator.clusterWide" .) }}
{{- range (include "seedrl-operator.watchNamespaces" . | fromYamlArray) }}
{{- $args = append $args (printf "--namespace=%s" .) }}
{{- end }}
{{- end }}
{{- $args = append $args (printf "--poll-seconds=%v" .Values.operator.pollSeconds) }}
{{- $args = append $args (printf "--liveness=http://0.0.0.0:%d/healthz" (int .Values.operator.livenessPort)) }}
{{- $args = append $args (printf "--metrics-port=%d" (int .Values.operator.metricsPort)) }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- $args = append $args (printf "--peering=%s" (include "seedrl-operator.fullname" .)) }}
{{- end }}
{{- $args = append $args (printf "--conversion-webhook-port=%d" (int .Values.conversionWebhook.port)) }}
{{- $args = append $args (printf "--conversion-webhook-secret=%s" (include "seedrl-operator.webhookSecret" .)) }}
{{- $args = append $args (printf "--conversion-webhook-service=%s" (include "seedrl-operator.webhookName" .)) }}
{{- toYaml (concat $args .Values.operator.extraArgs) }}
{{- end }}

{{/*
The rules the operator needs in a namespace it watches (a Role there, or the ClusterRole):
Experiments and the objects it renders for each, plus kopf's events.
*/}}
{{- define "seedrl-operator.rules" -}}
# The Experiments themselves: read and watch them, keep kopf's annotations (patch), write
# their status. No finalizer is ever added: the children go with their owner through the
# garbage collector.
- apiGroups: ["seedrl.dev"]
  resources: ["experiments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["seedrl.dev"]
  resources: ["experiments/status"]
  verbs: ["get", "patch"]
# Owner references with blockOwnerDeletion need update on the owner's finalizers.
- apiGroups: ["seedrl.dev"]
  resources: ["experiments/finalizers"]
  verbs: ["update"]
# What each Experiment becomes: the learner Job, its PodDisruptionBudget and (without a
# checkpoint uri) its run-directory claim, the actor Deployment, the learner's Service, the
# ConfigMap holding config.yaml, and the NetworkPolicy on the learner port. The operator
# creates, server-side-applies (patch) and deletes them by name, and watches the Jobs and
# Deployments (list, watch) instead of reading them at every refresh.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "persistentvolumeclaims"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
# The learner's TLS certificate (spec.learner.tls): where the cluster has no cert-manager, a
# Secret the operator makes (read, create, server-side-apply, delete by name; never listed).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch", "delete"]
# Where it has cert-manager: a self-signed Issuer and a Certificate per Experiment, which
# cert-manager turns into that Secret.
- apiGroups: ["cert-manager.io"]
  resources: ["issuers", "certificates"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "patch", "delete"]
# Cost and failure reasons: the operator watches an Experiment's pods (label
# seedrl.dev/experiment) to price what they requested for as long as they ran, and reads a
# failed learner pod's exit. It never creates a pod; it changes and deletes only a learner pod
# left Terminating on a lost node past its grace (marked Failed, DisruptionTarget, as the pod
# garbage collector does), so that the learner Job replaces it.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Events on the Experiments (phase changes, failures, learner replacements) and kopf's own.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# kopf's peering between replicas: each keeps its keep-alive in the peering object's status.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings", "clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
# Kueue (spec.queueName): suspend and resume a queued learner through its Workload's
# spec.active; Kueue itself suspends and admits the Job.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "patch"]
{{- end }}
