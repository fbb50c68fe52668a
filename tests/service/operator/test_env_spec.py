"""Deriving the env spec outside the learner's pod (service/operator/env_spec.py): what the
env-spec Job's pod reports, and what the status says while it runs and when it fails."""

from __future__ import annotations

from seedrl.common.wire import EnvSpec
from seedrl.service.operator.env_spec import EnvSpecProgress, reported_spec
from seedrl.service.operator.status import compute_status

NOW = "2026-01-01T00:00:10Z"
SPEC = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2)


def _pod(phase, state, name="exp-envspec-x1", job="exp-envspec"):
    return {
        "metadata": {
            "name": name,
            "labels": {"seedrl.dev/role": "env-spec", "job-name": job},
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "env-spec", "state": state}]},
    }


def _terminated(code, message):
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "finishedAt": "2026-01-01T00:00:09Z",
            "message": message,
        }
    }


def _status(exp, env_spec=None, previous=None, job=None):
    """The status computed at NOW with nothing but the learner Job and the env spec's
    progress observed."""
    return compute_status(
        exp,
        generation=1,
        previous=previous,
        job=job,
        deployment=None,
        learner=None,
        now=NOW,
        env_spec=env_spec,
    )


def conds(status):
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_the_spec_is_read_from_the_pod_that_succeeded():
    pods = [
        _pod("Failed", _terminated(137, "")),
        _pod("Succeeded", _terminated(0, SPEC.to_message()), name="exp-envspec-x2"),
    ]
    text, why = reported_spec(pods)
    assert why is None and EnvSpec.from_message(text) == SPEC


def test_the_message_is_copied_as_it_is_and_an_empty_one_is_refused():
    """The learner reads the spec and refuses one that is none (BAD_CONFIG, with the reason):
    the operator only copies what the pod reported, compressed or not."""
    wide = EnvSpec("Arm-v0", "float32", (4,), "float32", (600,), 0, (-1.0,) * 600, (1.0,) * 600)
    text, why = reported_spec([_pod("Succeeded", _terminated(0, wide.to_message()))])
    assert why is None and text == wide.to_message() + "\n"
    text, why = reported_spec([_pod("Succeeded", _terminated(0, ""))])
    assert text is None and why == "pod exp-envspec-x1 reported no env spec"
    assert reported_spec([])[0] is None


def test_while_it_runs_the_learner_waits_and_says_why(exp_of):
    exp = exp_of()
    deriving = EnvSpecProgress(ready=False, pods=(_pod("Running", {"running": {}}),))
    status = _status(exp, deriving)
    assert status["phase"] == "Pending"
    ready, reason, message = conds(status)["LearnerReady"]
    assert (ready, reason) == ("False", "DerivingEnvSpec") and "exp-envspec" in message
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    stuck = EnvSpecProgress(ready=False, pods=(_pod("Pending", waiting),))
    status = _status(exp, stuck)
    ready, reason, message = conds(status)["LearnerReady"]
    assert (ready, reason) == ("False", "ImagePullBackOff")
    assert message == (
        "The env-spec pod (Job exp-envspec) cannot start: container env-spec: "
        "Back-off pulling image"
    )


def test_an_env_that_cannot_be_made_fails_the_experiment_with_its_words(exp_of):
    exp = exp_of(actors={"replicas": 3})
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "Container env-spec for pod team-a/exp-envspec-x1 failed with exit code 2 "
        "matching FailJob rule at index 2",
        "lastTransitionTime": "2026-01-01T00:00:09Z",
    }
    words = "cannot make environments: spec.env.id: cannot make 'NoSuchEnv-v9'\n"
    pods = (_pod("Failed", _terminated(2, words)),)
    status = _status(exp, EnvSpecProgress(ready=False, failed=failed, pods=pods))
    assert status["phase"] == "Failed"
    assert status["completionTime"] == "2026-01-01T00:00:09Z"
    assert status["actors"]["desired"] == 0
    ok, reason, message = conds(status)["Failed"]
    assert (ok, reason) == ("True", "InvalidConfiguration")
    assert "env-spec pod exp-envspec-x1: exit code 2" in message
    assert message.endswith("cannot make 'NoSuchEnv-v9'")
    assert conds(status)["LearnerReady"][1] == "EnvSpecFailed"
    # The same with the learner Job still there (its pod waits for the spec): it is stopped.
    waiting = _status(
        exp, EnvSpecProgress(ready=False, failed=failed, pods=pods), job={"status": {"active": 1}}
    )
    assert waiting["phase"] == "Failed" and conds(waiting)["Failed"] == conds(status)["Failed"]
    assert conds(waiting)["LearnerReady"][1] == "EnvSpecFailed"
    # Later polls find no learner Job and no progress to report: it stays as it was said.
    again = compute_status(
        exp, generation=1, previous=status, job=None, deployment=None, learner=None, now=NOW
    )
    assert again["phase"] == "Failed"
    assert conds(again)["Failed"] == conds(status)["Failed"]
    assert conds(again)["LearnerReady"] == conds(status)["LearnerReady"]


def test_the_operator_acts_only_when_there_is_something_to_do():
    """Polls read where the env spec stands; they apply only when it asks for work: the Job to
    make, its spec to copy, or a learner to stop."""
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    running = {"status": {"active": 1}}
    failed = {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}
    assert EnvSpecProgress(ready=False).actionable  # no Job yet
    assert not EnvSpecProgress(ready=False, job=running).actionable
    assert EnvSpecProgress(ready=False, job=complete, spec_json="{}").actionable
    assert EnvSpecProgress(ready=False, job=running, failed=failed).actionable
    assert not EnvSpecProgress(ready=True).actionable
