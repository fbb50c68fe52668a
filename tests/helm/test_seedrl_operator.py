"""The seedrl-operator chart, rendered by the real helm binary and validated offline."""

from __future__ import annotations

import json
import shutil

import helm_python as helm_sdk
import pytest
import yaml

from support.charts import (
    CRD_FILE,
    OPERATOR_CHART,
    lint,
    load_manifests,
    of_kind,
    render,
    run_helm,
    template,
    validate_all,
    validate_builtin,
)

pytestmark = pytest.mark.helm

#: Value sets every test of the chart's validity runs over.
VALUE_SETS = {
    "defaults": {},
    "namespaced": {
        "watch": {"scope": "namespaces", "namespaces": ["team-a", "team-b"]},
        "rbac": {"discovery": False, "aggregateToDefaultRoles": False},
        # The CRD is cluster-scoped: another release (or the platform team) installs it.
        "crd": {"install": False},
    },
    "release-namespace-only": {"watch": {"scope": "namespaces"}},
    "monitoring-and-overrides": {
        "metrics": {"podMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "grafana": {"dashboards": {"enabled": True}},
        "operator": {
            "pollSeconds": 2.5,
            "livenessPort": 9000,
            "metricsPort": 9100,
            "extraArgs": ["--extra=1"],
            "env": [{"name": "SEEDRL_X", "value": "1"}],
        },
        "prices": {
            "version": "acme-discounts-2026",
            "cpu": {"onDemand": 0.03, "spot": 0.01},
            "tpu": {"v5e": {"onDemand": 1.0, "spot": 0.4}},
        },
        "image": {"digest": "sha256:" + "a" * 64},
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "op@p.iam"}},
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
        ],
    },
}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lints_strict_and_every_manifest_is_valid(name, tmp_path):
    values = VALUE_SETS[name]
    lint(OPERATOR_CHART, values, tmp_path)
    # The CRD does not depend on values: test_installs_the_generated_crd validates it once.
    manifests = render(OPERATOR_CHART, values=values, tmp_path=tmp_path)
    kinds = {m["kind"] for m in manifests}
    assert {
        "ServiceAccount",
        "Deployment",
        "ClusterRole" if name != "namespaced" else "Role",
    } <= kinds
    validate_all(manifests)


def test_installs_the_generated_crd_as_a_template_helm_keeps():
    manifests = render(OPERATOR_CHART, include_crds=True)
    crds = {c["metadata"]["name"]: c for c in of_kind(manifests, "CustomResourceDefinition")}
    # kopf's peering CRDs come along from crds/, for the replicas' leader election.
    assert set(crds) == {
        "experiments.seedrl.dev",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }
    for other in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"):
        validate_builtin(crds[other])
    # The Experiment CRD is a template, so every `helm upgrade` applies it; Helm keeps it on
    # uninstall and rollback, which would otherwise delete every Experiment with it.
    (crd,) = of_kind(render(OPERATOR_CHART, release="op"), "CustomResourceDefinition")
    validate_builtin(crd)  # apiextensions.k8s.io/v1, strict, Kubernetes 1.30 to 1.37
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    assert {n: (v["served"], v["storage"]) for n, v in served.items()} == {
        "v1alpha1": (True, True),
        "v1beta1": (True, False),
    }
    # v1alpha1 is the schema k8s/crd/ ships; v1beta1 is it without the retired fields.
    assert (
        served["v1alpha1"]["schema"]
        == yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]
    )
    beta_r2d2 = served["v1beta1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "agent"
    ]["properties"]["r2d2"]["properties"]
    assert "sequenceLength" not in beta_r2d2 and "trainLength" in beta_r2d2
    # Conversions go to this release's webhook Service, which routes to the operator's port.
    webhook = crd["spec"]["conversion"]["webhook"]
    assert webhook["clientConfig"]["service"] == {
        "namespace": "seedrl",
        "name": "op-seedrl-operator-webhook",
        "path": "/convert",
        "port": 443,
    }
    assert "caBundle" not in webhook["clientConfig"]  # the operator's (webhook_certificate)
    (service,) = [s for s in of_kind(render(OPERATOR_CHART, release="op"), "Service")
                  if s["metadata"]["name"] == "op-seedrl-operator-webhook"]  # fmt: skip
    assert service["spec"]["ports"][0]["port"] == 443
    (deployment,) = of_kind(render(OPERATOR_CHART, release="op"), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    assert set(service["spec"]["selector"].items()) <= set(
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert {
        "--conversion-webhook-port=9443",
        "--conversion-webhook-secret=op-seedrl-operator-webhook-tls",
        "--conversion-webhook-service=op-seedrl-operator-webhook",
    } <= set(container["args"])


def test_stores_the_version_asked_for_or_leaves_the_crd_out():
    (crd,) = of_kind(
        render(OPERATOR_CHART, sets=["crd.storageVersion=v1beta1"]), "CustomResourceDefinition"
    )
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1beta1"]
    assert not of_kind(
        render(OPERATOR_CHART, sets=["crd.install=false"]), "CustomResourceDefinition"
    )
    # A version it does not serve is refused before anything renders.
    refused = template(OPERATOR_CHART, sets=["crd.storageVersion=v1"], check=False)
    assert refused.returncode != 0 and "storageVersion" in refused.stderr


def _rules(role):
    return {
        (group, res): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
    }


def _check_least_privilege(role):
    rules = _rules(role)
    for (group, res), verbs in rules.items():
        assert "*" not in verbs and group != "*" and res != "*", (group, res)
    # Secrets: only the learner's certificate, by name (spec.learner.tls): never listed or
    # watched, so the operator cannot enumerate what else a namespace keeps.
    assert rules[("", "secrets")] == {"get", "create", "patch", "delete"}
    assert (
        rules[("cert-manager.io", "issuers")]
        == rules[("cert-manager.io", "certificates")]
        == {"get", "create", "patch", "delete"}
    )
    # The operator reads and patches Experiments; users create and delete them.
    assert rules[("seedrl.dev", "experiments")] == {"get", "list", "watch", "patch"}
    assert rules[("seedrl.dev", "experiments/status")] == {"get", "patch"}
    # Exactly what service/operator/handlers.py does with the children: the Jobs and
    # Deployments are watched as well.
    for child in [("batch", "jobs"), ("apps", "deployments")]:
        assert rules[child] == {"get", "list", "watch", "create", "patch", "delete"}, child
    for child in [
        ("", "services"),
        ("", "configmaps"),
        ("", "persistentvolumeclaims"),
        ("networking.k8s.io", "networkpolicies"),
        ("policy", "poddisruptionbudgets"),
    ]:
        assert rules[child] == {"get", "create", "patch", "delete"}, child
    # Pods are read and watched, to price them (status.cost) and name failures; a learner pod
    # stranded on a lost node is marked Failed and deleted, as the pod garbage collector does.
    assert rules[("", "pods")] == {"get", "list", "watch", "delete"}
    assert rules[("", "pods/status")] == {"patch"}
    assert rules[("", "events")] == {"create"}
    assert rules[("kueue.x-k8s.io", "workloads")] == {"get", "list", "patch"}
    assert rules[("kopf.dev", "clusterkopfpeerings")] == {"get", "list", "watch", "patch"}
    assert set(rules) == {
        ("seedrl.dev", "experiments"),
        ("seedrl.dev", "experiments/status"),
        ("seedrl.dev", "experiments/finalizers"),
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("", "services"),
        ("", "configmaps"),
        ("", "persistentvolumeclaims"),
        ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "networkpolicies"),
        ("", "events"),
        ("", "pods"),
        ("", "pods/status"),
        ("kueue.x-k8s.io", "workloads"),
        ("kopf.dev", "kopfpeerings"),
        ("kopf.dev", "clusterkopfpeerings"),
        ("", "secrets"),
        ("cert-manager.io", "issuers"),
        ("cert-manager.io", "certificates"),
    }
    return rules


def _webhook_rules(role):
    return {
        (group, res, tuple(rule.get("resourceNames") or ())): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
    }


def test_cluster_scope_binds_one_cluster_role():
    manifests = render(OPERATOR_CHART, release="op", namespace="seedrl-system")
    # The one Role: the webhook certificate's Secret, in the release namespace.
    (webhook_role,) = of_kind(manifests, "Role")
    assert webhook_role["metadata"]["namespace"] == "seedrl-system"
    assert _webhook_rules(webhook_role) == {
        ("", "secrets", ()): {"create"},
        ("", "secrets", ("op-seedrl-operator-webhook-tls",)): {"get", "update"},
    }
    roles = {r["metadata"]["name"]: r for r in of_kind(manifests, "ClusterRole")}
    assert set(roles) == {
        f"seedrl-system-op-seedrl-operator-{suffix}"
        for suffix in ("operator", "discovery", "edit", "view", "crd-ca")
    }
    # The CRD's caBundle: that CRD alone.
    assert _webhook_rules(roles["seedrl-system-op-seedrl-operator-crd-ca"]) == {
        ("apiextensions.k8s.io", "customresourcedefinitions", ("experiments.seedrl.dev",)): {
            "get",
            "patch",
        }
    }
    operator = roles["seedrl-system-op-seedrl-operator-operator"]
    _check_least_privilege(operator)
    # Two replicas by default, electing the active one through this peering object.
    (peering,) = of_kind(manifests, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "op-seedrl-operator"
    discovery = _rules(roles["seedrl-system-op-seedrl-operator-discovery"])
    assert discovery == {
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "namespaces"): {"list", "watch"},
    }
    for binding in of_kind(manifests, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] in roles
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "op-seedrl-operator", "namespace": "seedrl-system"}
        ]
    (deployment,) = of_kind(manifests, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # No --namespace: python -m seedrl.service.operator then watches every namespace.
    assert args == [
        "--poll-seconds=10",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=8081",
        "--peering=op-seedrl-operator",
        "--conversion-webhook-port=9443",
        "--conversion-webhook-secret=op-seedrl-operator-webhook-tls",
        "--conversion-webhook-service=op-seedrl-operator-webhook",
    ]
    assert deployment["spec"]["replicas"] == 2
    # One replica runs standalone: no peering.
    manifests = render(
        OPERATOR_CHART, release="op", namespace="seedrl-system", sets=["replicaCount=1"]
    )
    assert not of_kind(manifests, "ClusterKopfPeering")
    (deployment,) = of_kind(manifests, "Deployment")
    assert "--peering" not in " ".join(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_users_get_experiment_rights_through_the_default_roles():
    roles = {
        r["metadata"]["name"]: r
        for r in of_kind(render(OPERATOR_CHART, release="op", namespace="ops"), "ClusterRole")
    }
    edit, view = roles["ops-op-seedrl-operator-edit"], roles["ops-op-seedrl-operator-view"]
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert {"create", "delete", "patch"} <= _rules(edit)[("seedrl.dev", "experiments")]
    assert _rules(edit)[("seedrl.dev", "experiments/status")] == {"get"}  # the operator's
    assert all(verbs == {"get", "list", "watch"} for verbs in _rules(view).values())
    # Nothing is bound: Kubernetes folds them into admin, edit and view by their labels.
    names = {
        b["roleRef"]["name"]
        for b in of_kind(
            render(OPERATOR_CHART, release="op", namespace="ops"), "ClusterRoleBinding"
        )
    }
    assert not names & {"ops-op-seedrl-operator-edit", "ops-op-seedrl-operator-view"}


def test_namespace_scope_grants_roles_only_in_the_watched_namespaces(tmp_path):
    values = VALUE_SETS["namespaced"]
    manifests = render(
        OPERATOR_CHART, release="op", namespace="ops", values=values, tmp_path=tmp_path
    )
    # Nothing cluster-wide at all once discovery, the users' aggregated roles and the CRD
    # are off.
    assert not of_kind(manifests, "ClusterRole") and not of_kind(manifests, "ClusterRoleBinding")
    roles = [
        r for r in of_kind(manifests, "Role") if not r["metadata"]["name"].endswith("-webhook")
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        _check_least_privilege(role)
    bindings = [
        b
        for b in of_kind(manifests, "RoleBinding")
        if not b["metadata"]["name"].endswith("-webhook")
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["subjects"][0]["namespace"] == "ops"
    (deployment,) = of_kind(manifests, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [
        "--namespace=team-a",
        "--namespace=team-b",
        "--poll-seconds=10",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=8081",
        "--peering=op-seedrl-operator",
        "--conversion-webhook-port=9443",
        "--conversion-webhook-secret=op-seedrl-operator-webhook-tls",
        "--conversion-webhook-service=op-seedrl-operator-webhook",
    ]

    # No namespaces listed: only the release's own.
    manifests = render(
        OPERATOR_CHART, release="op", namespace="ops", sets=["watch.scope=namespaces"]
    )
    assert [r["metadata"]["namespace"] for r in of_kind(manifests, "Role")] == ["ops", "ops"]


def test_namespace_scope_has_a_peering_object_in_every_watched_namespace(tmp_path):
    # A namespace-scoped kopf keeps one peering per watched namespace (a KopfPeering named
    # --peering there) and pauses every watch while one of them is missing: the first
    # namespace's alone would leave the operator reconciling nothing.
    manifests = render(
        OPERATOR_CHART,
        release="op",
        namespace="ops",
        values=VALUE_SETS["namespaced"],
        tmp_path=tmp_path,
    )
    assert not of_kind(manifests, "ClusterKopfPeering")
    peerings = of_kind(manifests, "KopfPeering")
    assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in peerings) == [
        ("team-a", "op-seedrl-operator"),
        ("team-b", "op-seedrl-operator"),
    ]
    # The operator may keep its record in each of them (the Role of that namespace).
    roles = {r["metadata"]["namespace"]: r for r in of_kind(manifests, "Role")}
    for peering in peerings:
        rules = _rules(roles[peering["metadata"]["namespace"]])
        assert {"get", "watch", "patch"} <= rules[("kopf.dev", "kopfpeerings")]
    # Only the release namespace watched: the peering is there.
    manifests = render(
        OPERATOR_CHART, release="op", namespace="ops", sets=["watch.scope=namespaces"]
    )
    assert [p["metadata"]["namespace"] for p in of_kind(manifests, "KopfPeering")] == ["ops"]
    # One replica runs standalone: no peering anywhere.
    manifests = render(
        OPERATOR_CHART,
        release="op",
        namespace="ops",
        values=VALUE_SETS["namespaced"],
        tmp_path=tmp_path,
        sets=["replicaCount=1"],
    )
    assert not of_kind(manifests, "KopfPeering")


def test_operator_values_reach_the_container(tmp_path):
    manifests = render(
        OPERATOR_CHART, values=VALUE_SETS["monitoring-and-overrides"], tmp_path=tmp_path
    )
    (deployment,) = of_kind(manifests, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "--poll-seconds=2.5",
        "--liveness=http://0.0.0.0:9000/healthz",
        "--metrics-port=9100",
        "--peering=test-seedrl-operator",
        "--conversion-webhook-port=9443",
        "--conversion-webhook-secret=test-seedrl-operator-webhook-tls",
        "--conversion-webhook-service=test-seedrl-operator-webhook",
        "--extra=1",
    ]
    assert container["ports"] == [
        {"name": "health", "containerPort": 9000, "protocol": "TCP"},
        {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9100, "protocol": "TCP"},
    ]
    assert {"name": "SEEDRL_X", "value": "1"} in container["env"]
    assert container["image"] == "ghcr.io/seedrl/operator@sha256:" + "a" * 64
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (account,) = of_kind(manifests, "ServiceAccount")
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "op@p.iam"}


def test_operator_pod_is_locked_down():
    (deployment,) = of_kind(render(OPERATOR_CHART, sets=["replicaCount=1"]), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    (deployment,) = of_kind(render(OPERATOR_CHART), "Deployment")
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "seedrl.service.operator"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["image"] == "ghcr.io/seedrl/operator:0.1.0"  # the chart's appVersion


def test_replicas_spread_and_a_budget_keeps_one_through_drains():
    manifests = render(OPERATOR_CHART)
    (pdb,) = of_kind(manifests, "PodDisruptionBudget")
    (deployment,) = of_kind(manifests, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [(t["podAffinityTerm"]["topologyKey"], t["weight"]) for t in terms] == [
        ("kubernetes.io/hostname", 100),
        ("topology.kubernetes.io/zone", 50),
    ]
    assert all(t["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector for t in terms)
    # One replica: no budget (it would block every drain) and nothing to spread.
    single = render(OPERATOR_CHART, sets=["replicaCount=1"])
    assert of_kind(single, "PodDisruptionBudget") == []
    (deployment,) = of_kind(single, "Deployment")
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    # An affinity of one's own replaces the default; the budget can be left out.
    own = render(
        OPERATOR_CHART,
        sets=[
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
            "podDisruptionBudget.enabled=false",
        ],
    )
    (deployment,) = of_kind(own, "Deployment")
    assert list(deployment["spec"]["template"]["spec"]["affinity"]) == ["nodeAffinity"]
    assert of_kind(own, "PodDisruptionBudget") == []


def test_pod_monitor_scrapes_the_experiments_pods(tmp_path):
    manifests = render(
        OPERATOR_CHART, values=VALUE_SETS["monitoring-and-overrides"], tmp_path=tmp_path
    )
    monitors = {m["metadata"]["name"]: m for m in of_kind(manifests, "PodMonitor")}
    assert set(monitors) == {"test-seedrl-operator-experiments", "test-seedrl-operator-operator"}
    monitor = monitors["test-seedrl-operator-experiments"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    # The labels the operator puts on every learner and actor pod (operator/render/common.py).
    assert spec["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "seedrl",
            "app.kubernetes.io/managed-by": "seedrl-operator",
        }
    }
    assert spec["namespaceSelector"] == {"any": True}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"

    manifests = render(
        OPERATOR_CHART,
        namespace="ops",
        sets=["metrics.podMonitor.enabled=true", "watch.scope=namespaces"],
    )
    (monitor,) = [
        m
        for m in of_kind(manifests, "PodMonitor")
        if m["metadata"]["name"].endswith("-experiments")
    ]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert not of_kind(render(OPERATOR_CHART), "PodMonitor")


def test_pod_monitor_scrapes_the_operator_itself(tmp_path):
    manifests = render(
        OPERATOR_CHART,
        release="op",
        namespace="seedrl-system",
        values=VALUE_SETS["monitoring-and-overrides"],
        tmp_path=tmp_path,
    )
    (monitor,) = [
        m
        for m in of_kind(manifests, "PodMonitor")
        if m["metadata"]["name"] == "op-seedrl-operator-operator"
    ]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    (deployment,) = of_kind(manifests, "Deployment")
    pod = deployment["spec"]["template"]
    # It selects the operator pod and nothing else: the Deployment's own selector.
    assert spec["selector"] == deployment["spec"]["selector"]
    assert all(
        pod["metadata"]["labels"][k] == v for k, v in spec["selector"]["matchLabels"].items()
    )
    assert spec["namespaceSelector"] == {"matchNames": ["seedrl-system"]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in pod["spec"][
        "containers"
    ][0]["ports"]
    assert endpoint["relabelings"] == [{"targetLabel": "seedrl_role", "replacement": "operator"}]
    # Its series carry each Experiment's namespace: Prometheus must keep that label.
    assert endpoint["honorLabels"] is True
    # metricsPort 0: no endpoint, so nothing to scrape.
    manifests = render(
        OPERATOR_CHART, sets=["metrics.podMonitor.enabled=true", "operator.metricsPort=0"]
    )
    assert [m["metadata"]["name"] for m in of_kind(manifests, "PodMonitor")] == [
        "test-seedrl-operator-experiments"
    ]
    (deployment,) = of_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [p["name"] for p in container["ports"]] == ["health", "webhook"]
    assert "--metrics-port=0" in container["args"]


def test_a_price_override_is_mounted_where_the_operator_reads_it(tmp_path):
    from seedrl.service import cost

    values = VALUE_SETS["monitoring-and-overrides"]
    manifests = render(OPERATOR_CHART, release="op", values=values, tmp_path=tmp_path)
    maps = {m["metadata"]["name"]: m for m in of_kind(manifests, "ConfigMap")}
    config_map = maps["op-seedrl-operator-prices"]
    (deployment,) = of_kind(manifests, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = {m["name"]: m for m in container["volumeMounts"]}["prices"]
    assert env["SEEDRL_PRICES"] == mount["mountPath"] and mount["readOnly"] is True
    assert {"name": "prices", "configMap": {"name": "op-seedrl-operator-prices"}} in pod["volumes"]
    # The operator's own loader reads the mounted directory as the kubelet would lay it out.
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for key, text in config_map["data"].items():
        (mounted / key).write_text(text)
    table = cost.load_prices(environ={cost.PRICES_ENV: str(mounted)})
    assert table.version == "acme-discounts-2026"
    assert (table.cpu.on_demand, table.cpu.spot) == (0.03, 0.01)
    assert table.tpu["v5e"].on_demand == 1.0
    assert table.memory == cost.load_prices(environ={}).memory  # left out: the packaged rate
    checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/prices"]
    assert len(checksum) == 64
    # Without an override: no ConfigMap, no variable, the packaged table.
    (deployment,) = of_kind(render(OPERATOR_CHART), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "SEEDRL_PRICES" not in {e["name"] for e in container["env"]}
    assert not of_kind(render(OPERATOR_CHART), "ConfigMap")


def test_every_dashboard_file_becomes_a_labelled_config_map(tmp_path):
    chart = tmp_path / "seedrl-operator"
    shutil.copytree(OPERATOR_CHART, chart)
    shipped = sorted(p.name for p in (OPERATOR_CHART / "dashboards").glob("*.json"))
    assert shipped == ["seedrl-experiment.json", "seedrl-overview.json"]
    # Adding a dashboard is adding its file.
    extra = {"title": "seedrl actors", "panels": []}
    (chart / "dashboards" / "Actors_Overview.json").write_text(json.dumps(extra))
    lint(chart, sets=["grafana.dashboards.enabled=true"])
    manifests = render(
        chart,
        release="op",
        sets=["grafana.dashboards.enabled=true", "grafana.dashboards.namespace=monitoring"],
    )
    maps = {m["metadata"]["name"]: m for m in of_kind(manifests, "ConfigMap")}
    assert set(maps) == {
        "op-seedrl-operator-dashboard-seedrl-experiment",
        "op-seedrl-operator-dashboard-seedrl-overview",
        "op-seedrl-operator-dashboard-actors-overview",
    }
    for m in maps.values():
        validate_builtin(m)
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert m["metadata"]["namespace"] == "monitoring"
    overview = maps["op-seedrl-operator-dashboard-seedrl-overview"]["data"]
    assert json.loads(overview["seedrl-overview.json"]) == json.loads(
        (OPERATOR_CHART / "dashboards" / "seedrl-overview.json").read_text()
    )
    assert not of_kind(render(chart), "ConfigMap")  # off by default


@pytest.mark.parametrize(
    "setting, path",
    [
        ("watch.scope=everywhere", "/watch/scope"),
        ("operator.livenessPort=70000", "/operator/livenessPort"),
        ("operator.pollSeconds=0", "/operator/pollSeconds"),
        ("watch.namespaces={Bad_NS}", "/watch/namespaces/0"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("rbac.creat=true", "/rbac"),
        ("operator.metricsPort=70000", "/operator/metricsPort"),
        ("prices.region=europe-west4", "/prices"),
        ("prices.cpus=1", "/prices"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(setting, path):
    proc = template(OPERATOR_CHART, sets=[setting], check=False)
    assert proc.returncode != 0
    assert f"at '{path}'" in proc.stderr, proc.stderr


def test_kubernetes_older_than_1_30_is_refused():
    # 1.30 made ValidatingAdmissionPolicy GA (templates/admissionpolicy.yaml).
    old = run_helm("template", "x", str(OPERATOR_CHART), "--kube-version", "1.29.9", check=False)
    assert old.returncode != 0 and "kubeVersion" in old.stderr, old.stderr
    run_helm("template", "x", str(OPERATOR_CHART), "--kube-version", "1.33.0")


def test_helm_sdk_renders_the_same_manifests_and_the_notes(tmp_path):
    # helm-python-sdk embeds another Helm release (the SDK's, v4.2.x) than the binary (v4.1.4):
    # the same output from both shows the chart does not lean on one version's quirks. It also
    # renders NOTES.txt, which `helm template` leaves out.
    values = VALUE_SETS["namespaced"]
    with helm_sdk.Chart.load(OPERATOR_CHART) as chart:
        rendered = chart.render(values, name="op", namespace="ops")
    notes = rendered.pop("seedrl-operator/templates/NOTES.txt")
    sdk = load_manifests("\n---\n".join(rendered.values()))
    binary = render(OPERATOR_CHART, release="op", namespace="ops", values=values, tmp_path=tmp_path)

    def key(m):
        return m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]

    assert sorted(sdk, key=key) == sorted(binary, key=key)
    assert "only in: team-a, team-b" in notes
    assert "kubectl -n ops rollout status deployment/op-seedrl-operator" in notes
    assert "kubectl get experiments -n NAMESPACE -w" in notes


@pytest.mark.parametrize(
    "name, clusterwide, namespaces",
    [
        ("defaults", True, []),
        ("namespaced", False, ["team-a", "team-b"]),
    ],
)
def test_the_operator_accepts_the_arguments_the_chart_gives_it(
    name, clusterwide, namespaces, tmp_path, monkeypatch
):
    # The rendered command line goes through the operator's own argument parsing, up to the
    # point where it would start kopf.
    from seedrl.service.operator import handlers as operator

    started, served = [], []

    class Server:
        """Records what main() serves instead of binding a port in the test."""

        def __init__(self, registry, host, port):
            served.append((host, port))
            self.port = port

        def start(self):
            return self.port

        def stop(self):
            served.append("stopped")

    class Certificate:
        """Records the webhook certificate main() would keep, without a cluster."""

        def __init__(self, api_client, namespace, secret, dns_names, crd_name, folder):
            kept.append((namespace, secret, dns_names, crd_name))
            self.folder = folder

        def ensure(self):
            return True

        def refresh(self, on_change, stop, interval=0):
            stop.wait()

    class Webhook:
        def __init__(self, host, port, cert, key):
            served.append((host, port))
            self.port = port

        def start(self):
            return self

        def reload(self):
            pass

        def stop(self):
            pass

    kept: list = []
    monkeypatch.setattr(operator, "WebhookCertificate", Certificate)
    monkeypatch.setattr(operator, "ConversionWebhook", Webhook)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    monkeypatch.setattr(operator, "MetricsServer", Server)
    monkeypatch.delenv("SEEDRL_PRICES", raising=False)
    monkeypatch.setattr(operator, "api_client", lambda: None)
    monkeypatch.setattr(operator.kopf, "run", lambda **kwargs: started.append(kwargs))
    (deployment,) = of_kind(
        render(OPERATOR_CHART, values=VALUE_SETS[name], tmp_path=tmp_path), "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][-2:] == ["-m", "seedrl.service.operator"]
    assert operator.main(container["args"]) == 0
    (kwargs,) = started
    assert kwargs["clusterwide"] is clusterwide
    assert list(kwargs["namespaces"]) == namespaces
    assert kwargs["liveness_endpoint"] == "http://0.0.0.0:8080/healthz"
    assert served == [("0.0.0.0", 8081), ("0.0.0.0", 9443), "stopped"]
    assert kept == [
        (
            "ops",
            "test-seedrl-operator-webhook-tls",
            [
                "test-seedrl-operator-webhook.ops.svc",
                "test-seedrl-operator-webhook.ops.svc.cluster.local",
            ],
            "experiments.seedrl.dev",
        )
    ]


def test_gke_managed_prometheus_scrapes_the_experiments_and_the_operator():
    sets = ["metrics.podMonitor.enabled=true", "metrics.podMonitor.flavor=gke-managed"]
    manifests = render(OPERATOR_CHART, sets=[*sets, "metrics.podMonitor.labels.team=rl"])
    # Not the Prometheus Operator's kinds: GKE's Managed Service for Prometheus has its own.
    assert not of_kind(manifests, "PodMonitor")
    (cluster,) = of_kind(manifests, "ClusterPodMonitoring")
    assert cluster["apiVersion"] == "monitoring.googleapis.com/v1"
    assert "namespace" not in cluster["metadata"]  # cluster-scoped: every namespace
    assert cluster["metadata"]["labels"]["team"] == "rl"
    spec = cluster["spec"]
    assert spec["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "seedrl",
            "app.kubernetes.io/managed-by": "seedrl-operator",
        }
    }
    assert spec["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "timeout": "10s"}
    ]
    # The same target labels the Prometheus Operator flavour relabels into.
    assert spec["targetLabels"]["fromPod"] == [
        {"from": "seedrl.dev/experiment", "to": "seedrl_experiment"},
        {"from": "seedrl.dev/role", "to": "seedrl_role"},
    ]
    (own,) = of_kind(manifests, "PodMonitoring")
    assert own["metadata"]["namespace"] == "seedrl" and own["spec"]["endpoints"][0]["port"] == (
        "metrics"
    )
    # Watching namespaces: a PodMonitoring only selects pods of its own namespace, so one in
    # each, and nothing cluster-wide.
    manifests = render(
        OPERATOR_CHART,
        namespace="ops",
        sets=[*sets, "watch.scope=namespaces", "watch.namespaces={team-a,team-b}"],
    )
    assert not of_kind(manifests, "ClusterPodMonitoring")
    assert sorted(
        (m["metadata"]["namespace"], m["metadata"]["name"])
        for m in of_kind(manifests, "PodMonitoring")
    ) == [
        ("ops", "test-seedrl-operator-operator"),
        ("team-a", "test-seedrl-operator-experiments"),
        ("team-b", "test-seedrl-operator-experiments"),
    ]
    lint(OPERATOR_CHART, sets=sets)
    bad = template(
        OPERATOR_CHART, sets=[*sets[:1], "metrics.podMonitor.flavor=grafana"], check=False
    )
    assert bad.returncode != 0 and "flavor" in bad.stderr


def test_a_registry_mirror_for_the_experiments_images_reaches_the_operator():
    (deployment,) = of_kind(
        render(OPERATOR_CHART, sets=["experimentImages.registry=europe-docker.pkg.dev/p/seedrl"]),
        "Deployment",
    )
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SEEDRL_IMAGE_REGISTRY"] == "europe-docker.pkg.dev/p/seedrl"
    (default,) = of_kind(render(OPERATOR_CHART), "Deployment")
    names = [e["name"] for e in default["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "SEEDRL_IMAGE_REGISTRY" not in names
