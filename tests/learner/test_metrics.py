"""The learner's /metrics and /status over real HTTP, fed by real gRPC streams."""

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from seedrl.common.metrics_http import MetricsServer
from seedrl.learner.metrics import LearnerMetrics
from support.learner_harness import Stream, hello, step


def _scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _value(samples, name, **labels):
    labels = {"experiment": "test-exp", **labels}
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_follow_streams_episodes_and_training(learner):
    metrics = LearnerMetrics(learner.runtime)
    learner.runtime.observer = metrics
    server = MetricsServer(
        metrics.registry, lambda: learner.runtime.status().to_json(), host="127.0.0.1"
    )
    port = server.start()
    try:
        s = Stream(learner.address)
        s.send(hello(num_envs=2))
        s.recv()
        for i in range(30):
            # Env 0 ends an episode of 10 steps at steps 10, 20 and 30: returns 19, 29, 39.
            reward = 1.9 + (i - 1) // 10 if i else 0.0
            ends = i % 10 == 0 and i > 0
            s.send(
                step(
                    num_envs=2,
                    rewards=[reward, 0.0],
                    terminated=[ends, False],
                    episodes=[(0, 10 * reward, 10)] if ends else (),
                )
            )
            s.recv()
            metrics.tick()
        s.send(
            step(num_envs=2, rewards=[3.9, 0.0], terminated=[True, False], episodes=[(0, 39.0, 10)])
        )
        s.recv()
        samples = _scrape(port)
        assert _value(samples, "seedrl_learner_env_steps_total") == 62
        assert _value(samples, "seedrl_learner_env_frames_total") == 62
        assert _value(samples, "seedrl_learner_connected_actors") == 1
        assert _value(samples, "seedrl_learner_episodes_total", kind="train") == 3
        assert _value(samples, "seedrl_learner_episode_return_count", kind="train") == 3
        # Returns 19, 29 and 39 (no _sum: returns may be negative, so it is not a counter).
        assert _value(samples, "seedrl_learner_episode_return_bucket", kind="train", le="30.0") == 2
        assert (
            _value(samples, "seedrl_learner_episode_return_bucket", kind="train", le="100.0") == 3
        )
        assert _value(samples, "seedrl_learner_episode_length_steps_sum", kind="train") == 30
        assert _value(samples, "seedrl_learner_mean_return") == 29.0
        # One inference call per step here (a single stream): 31 batches of 2 env steps.
        assert _value(samples, "seedrl_learner_inference_batch_size_count") == 31
        assert _value(samples, "seedrl_learner_inference_batch_size_sum") == 62
        assert _value(samples, "seedrl_learner_inference_latency_seconds_count") == 31
        assert _value(samples, "seedrl_learner_env_frames_per_second") > 0
        # unrollLength 5, batchSize 2: 30 steps make unrolls, and the trainer takes them.
        assert (
            _value(samples, "seedrl_learner_steps_total") >= 1
            or _value(samples, "seedrl_learner_queued_unrolls") >= 1
        )
        status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10))
        assert status["env_steps"] == 62 and status["actors"] == 1
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert health.status == 200
        s.close()
    finally:
        server.stop()


def test_loss_terms_become_labelled_gauges(learner):
    metrics = LearnerMetrics(learner.runtime)
    learner.runtime.last_metrics = {
        "loss/total": 1.5,
        "loss/policy": -0.25,
        "grad_norm": 3.0,
        "policy_lag": 0.75,
    }
    server = MetricsServer(metrics.registry, host="127.0.0.1")
    port = server.start()
    try:
        samples = _scrape(port)
    finally:
        server.stop()
    assert _value(samples, "seedrl_learner_loss", term="total") == 1.5
    assert _value(samples, "seedrl_learner_loss", term="policy") == -0.25
    assert _value(samples, "seedrl_learner_train_stat", stat="grad_norm") == 3.0
    assert _value(samples, "seedrl_learner_policy_lag_updates") == 0.75


def test_an_unknown_path_is_404_and_no_status_without_a_callback():
    from prometheus_client import CollectorRegistry
    import urllib.error
    import pytest

    server = MetricsServer(CollectorRegistry(), host="127.0.0.1")
    port = server.start()
    try:
        for path in ("/status", "/nope"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert err.value.code == 404
    finally:
        server.stop()


def test_metrics_addresses_from_the_flag():
    from seedrl.common.metrics_http import bind_address

    assert bind_address(None, 9090) == ("0.0.0.0", 9090)
    assert bind_address("off", 9090) is None
    assert bind_address("127.0.0.1:5000", 9090) == ("127.0.0.1", 5000)
    assert bind_address("[::1]:5001", 9090) == ("::1", 5001)
    assert bind_address(":5002", 9090) == ("0.0.0.0", 5002)


def test_every_family_served_is_declared_in_common(learner):
    from seedrl.common import metrics as declared

    metrics = LearnerMetrics(learner.runtime)
    learner.runtime.last_metrics = {"loss/total": 1.5, "grad_norm": 3.0, "policy_lag": 0.75}
    by_name = {m.name: m for m in declared.LEARNER}
    served = list(metrics.registry.collect())
    assert len(served) >= 20
    for family in served:
        m = by_name[family.name]  # docs/reference/metrics.md is written from these
        assert (family.type, family.documentation) == (m.kind, m.help)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(m.labels), family.name
