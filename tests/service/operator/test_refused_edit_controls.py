"""While an edit of an immutable field is refused (SpecApplied=False, ImmutableFieldChanged),
a ``kubectl scale``, a suspend and a resume still reach the children, which otherwise keep the
spec they were made from (issue 37 item 2: after an upgrade that misread a spec, scale and
suspend were ignored). The real operator, Job controller and kubectl (the ``live`` fixture)."""

from __future__ import annotations

import pytest

from seedrl.service.operator.status import condition
from support.operator_harness import wait_for
from support.operator_live import STEP_S

pytestmark = [pytest.mark.cluster, pytest.mark.helm]


def test_scale_and_suspend_reach_the_children_while_an_edit_is_refused(live):
    live.create("refused")
    job = wait_for(lambda: live.job("refused"), timeout=STEP_S, what="the learner Job")

    def actors():
        return (live.read("Deployment", "refused-actors") or {}).get("spec", {}).get("replicas")

    wait_for(lambda: actors() == 4, timeout=STEP_S, what="4 actors")
    live.patch_spec("refused", {"env": {"id": "Acrobot-v1"}})

    def refused():
        applied = condition(live.status("refused"), "SpecApplied") or {}
        return applied.get("reason") == "ImmutableFieldChanged"

    wait_for(refused, timeout=STEP_S, what="the env edit refused")
    live.harness.cluster.kubectl("scale", "experiment/refused", "--replicas=2", "-n", live.ns)
    wait_for(lambda: actors() == 2, timeout=STEP_S, what="2 actors while refused")
    live.patch_spec("refused", {"suspend": True})
    wait_for(
        lambda: (live.job("refused") or {})["spec"].get("suspend") and actors() == 0,
        timeout=STEP_S,
        what="the learner suspended and no actors while refused",
    )
    live.patch_spec("refused", {"suspend": False})
    wait_for(
        lambda: not (live.job("refused") or {})["spec"].get("suspend") and actors() == 2,
        timeout=STEP_S,
        what="the learner resumed with 2 actors while refused",
    )
    assert refused()
    assert live.job("refused")["metadata"]["uid"] == job["metadata"]["uid"]
    config = live.core.read_namespaced_config_map("refused-config", live.ns)
    assert "CartPole-v1" in config.data["config.yaml"]  # the children keep the applied spec
