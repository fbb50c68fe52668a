"""The actor-critic networks: shapes, layer counts, LSTM unrolls and frame scaling."""

import numpy as np
import pytest
import tensorflow as tf

from seedrl.common.config import NetworkConfig
from seedrl.common.wire import EnvSpec
from seedrl.learner.distributions import Categorical, DiagGaussian
from seedrl.common.hardware import parse_cpuinfo
from seedrl.learner import devices
from seedrl.learner.checkpoint import tracked
from seedrl.learner.networks import MixedPrecision, make_actor_critic
from support.cpus import ZEN3, ZEN4

PONG = EnvSpec("ALE/Pong-v5", "uint8", (84, 84, 4), "int32", (), 6)
SMM = EnvSpec("Football/academy_empty_goal_close", "uint8", (72, 96, 4), "int32", (), 19)
VECTOR = EnvSpec("CartPole-v1", "float32", (4,), "int32", (), 2)
PENDULUM = EnvSpec("Pendulum-v1", "float32", (3,), "float32", (1,), 0, (-2.0,), (2.0,))


def _convs(net):
    return [v for v in net.trainable_variables if len(v.shape) == 4]


@pytest.mark.parametrize(
    "name,spec,convs",
    [("nature_cnn", PONG, 3), ("impala_resnet", PONG, 15), ("football_smm", SMM, 20)],
)
def test_conv_networks_read_frames(name, spec, convs):
    net = make_actor_critic(NetworkConfig(name=name), spec, Categorical(spec.num_actions))
    assert len(_convs(net)) == convs
    frames = np.random.default_rng(0).integers(0, 256, (3,) + spec.observation_shape, np.uint8)
    params, values = net(frames)
    assert params.shape == (3, spec.num_actions) and values.shape == (3,)
    assert np.isfinite(params.numpy()).all() and np.isfinite(values.numpy()).all()


def test_frames_are_scaled_to_unit_range():
    net = make_actor_critic(
        NetworkConfig(name="nature_cnn", precision="float32"), PONG, Categorical(6)
    )
    frames = np.full((2,) + PONG.observation_shape, 255, np.uint8)
    as_bytes, _ = net(frames)
    as_floats, _ = net(np.ones((2,) + PONG.observation_shape, np.float32))
    np.testing.assert_allclose(as_bytes, as_floats, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["nature_cnn", "impala_resnet"])
def test_bfloat16_torso_computes_in_bfloat16_and_matches_float32(name):
    full = make_actor_critic(NetworkConfig(name=name, precision="float32"), PONG, Categorical(6))
    mixed = make_actor_critic(NetworkConfig(name=name, precision="bfloat16"), PONG, Categorical(6))
    assert len(full.trainable_variables) == len(mixed.trainable_variables)
    for source, target in zip(full.trainable_variables, mixed.trainable_variables):
        assert target.dtype == tf.float32 and target.shape == source.shape
        target.assign(source)
    convs = [
        layer
        for layer in mixed.torso.torso._flatten_layers()
        if isinstance(layer, tf.keras.layers.Conv2D)
    ]
    assert convs and all(layer.compute_dtype == "bfloat16" for layer in convs)
    frames = np.random.default_rng(1).integers(0, 256, (4,) + PONG.observation_shape, np.uint8)
    (p32, v32), (p16, v16) = full(frames), mixed(frames)
    assert p16.dtype == tf.float32 and v16.dtype == tf.float32
    # bfloat16 keeps 8 bits of mantissa (~0.4% per rounding); a few layers of sums keep the
    # torso's features within a few percent of their scale (hundreds of ReLU outputs, so
    # their largest is never near zero).
    f32 = full.torso(frames).numpy()
    f16 = tf.cast(mixed.torso(frames), tf.float32).numpy()
    feature_error = 0.05 * float(np.abs(f32).max())
    np.testing.assert_allclose(f16, f32, rtol=0, atol=feature_error)
    # The heads run in float32 on those features: an output j moves by at most
    # sum_i |W_ij| * feature_error. Comparing the outputs at their own scale instead failed
    # when one came out near zero for some initial weights.
    for a, b, head in ((p32, p16, mixed.policy_head), (v32, v16, mixed.value_head)):
        bound = feature_error * np.abs(head.kernel.numpy()).sum(axis=0)
        error = np.abs(b.numpy() - a.numpy()).reshape(4, -1)
        assert (error <= bound + 1e-6).all(), (error, bound)


def test_conv_network_refuses_vector_observations():
    with pytest.raises(ValueError, match="reads frames"):
        make_actor_critic(NetworkConfig(name="impala_resnet"), VECTOR, Categorical(2))


def test_resnet_channels_are_configurable():
    net = make_actor_critic(
        NetworkConfig(name="impala_resnet", resnet_channels=[8, 8]), PONG, Categorical(6)
    )
    assert len(_convs(net)) == 10
    assert {v.shape[-1] for v in _convs(net)} == {8}


def test_mlp_keeps_separate_policy_and_value_streams():
    net = make_actor_critic(NetworkConfig(hidden_sizes=[16]), VECTOR, Categorical(2))
    with tf.GradientTape() as tape:
        _, values = net(np.ones((2, 4), np.float32))
    grads = tape.gradient(values, net.torso.trainable_variables)
    assert all(g is None for g in grads)


def test_gaussian_head_has_a_learned_log_std():
    spec = EnvSpec("HalfCheetah-v5", "float32", (17,), "float32", (6,), 0)
    net = make_actor_critic(NetworkConfig(), spec, DiagGaussian(6))
    params, _ = net(np.zeros((5, 17), np.float32))
    assert params.shape == (5, 12)
    assert np.all(np.abs(params.numpy()[:, :6]) <= 1.0)  # tanh-bounded means
    assert any("log_std" in v.name for v in net.trainable_variables)


def test_gaussian_policy_starts_at_the_configured_std():
    """spec.agent.network.initialStd sets the policy's spread before training (BatchPPO: 0.35);
    the default 1.0 is a log-std of zero."""
    obs = np.zeros((3, 3), np.float32)
    for std in (0.35, 1.0):
        net = make_actor_critic(NetworkConfig(initial_std=std), PENDULUM, DiagGaussian(1))
        params, _ = net(obs)
        # float32 log, then exp: a few units in the last place.
        np.testing.assert_allclose(
            np.exp(params.numpy()[:, 1]), std, rtol=4 * np.finfo(np.float32).eps
        )


@pytest.mark.parametrize(
    "spec,dist",
    [(VECTOR, Categorical(2)), (PENDULUM, DiagGaussian(1))],
    ids=["discrete", "gaussian"],
)
def test_lstm_unroll_equals_stepping_with_resets(spec, dist):
    config = NetworkConfig(hidden_sizes=[8], lstm_size=5)
    net = make_actor_critic(config, spec, dist)
    assert net.recurrent
    rng = np.random.default_rng(2)
    t, b = 6, 3
    obs = rng.normal(size=(t, b) + spec.observation_shape).astype(np.float32)
    actions = (
        rng.integers(0, 2, (t, b)).astype(np.int32)
        if spec.discrete
        else rng.normal(size=(t, b, 1)).astype(np.float32)
    )
    rewards = rng.normal(size=(t, b)).astype(np.float32) * 3
    first = np.zeros((t, b), bool)
    first[3, 1] = first[1, 2] = True
    first[0, 0] = True  # row 0 resets too
    state0 = [
        tf.constant(rng.normal(size=(b, s.shape[-1])), tf.float32) for s in net.initial_state(1)
    ]
    params, values = net.unroll(obs, first, state0, actions, rewards)

    # unroll() runs the torso on all t x b rows at once and step() on b rows: the matrix
    # products may add their terms in another order (the kernels depend on the row count).
    # Two orders of a float32 sum of k terms differ by at most 2 k u sum|x_i| (u = 2**-24);
    # the longest sum is an LSTM gate's (8 torso outputs, the reward, up to 2 previous-action
    # inputs, 5 state units, a bias), the terms are of order one, and the recurrence carries
    # each step's difference into the next.
    fan_in = 8 + 1 + 2 + 5 + 1
    tol = 2 * t * fan_in * float(np.finfo(np.float32).eps) / 2
    state = state0
    for i in range(t):
        keep = tf.constant(1.0 - first[i][:, None], tf.float32)
        state = [s * keep for s in state]  # a new episode: zero state, no previous action
        p, v, state = net.step(obs[i], state, rewards[i] * (1 - first[i]))
        state = net.record_action(state, actions[i])
        np.testing.assert_allclose(params[i], p, rtol=tol, atol=tol)
        np.testing.assert_allclose(values[i], v, rtol=tol, atol=tol)


def test_the_lstm_reads_the_previous_action_and_the_clipped_reward():
    net = make_actor_critic(NetworkConfig(hidden_sizes=[8], lstm_size=5), VECTOR, Categorical(2))
    state = net.initial_state(2)
    assert [s.shape for s in state] == [(2, 5), (2, 5), (2, 2)]  # h, c, one-hot action
    obs = np.ones((2, 4), np.float32)
    base, _, _ = net.step(obs, state, tf.zeros([2]))
    moved, _, _ = net.step(obs, net.record_action(state, np.array([1, 0])), tf.zeros([2]))
    assert not np.allclose(base, moved)
    rewarded, _, _ = net.step(obs, state, tf.constant([1.0, 1.0]))
    clipped, _, _ = net.step(obs, state, tf.constant([50.0, 50.0]))
    assert not np.allclose(base, rewarded)
    np.testing.assert_allclose(rewarded, clipped)  # clipped to [-1, 1] as in SEED
    plain = make_actor_critic(
        NetworkConfig(hidden_sizes=[8], lstm_size=5, action_reward_inputs=False),
        VECTOR,
        Categorical(2),
    )
    assert len(plain.initial_state(1)) == 2
    assert len(make_actor_critic(NetworkConfig(), VECTOR, Categorical(2)).initial_state(1)) == 0


@pytest.mark.parametrize(
    "cpu, name, mixed",
    [(ZEN3, "nature_cnn", False), (ZEN4, "nature_cnn", True), (ZEN4, "mlp", False)],
)
def test_auto_builds_the_torso_the_rule_picks_here(monkeypatch, cpu, name, mixed):
    # A network built outside the learner's setup (a policy, a benchmark) resolves auto for
    # the device it runs on: this CPU, described as a CPU without or with AVX512_BF16.
    monkeypatch.setattr(devices, "read_cpu", lambda: parse_cpuinfo(cpu))
    monkeypatch.setattr(devices, "local_kind", lambda: "cpu")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    spec = PONG if name != "mlp" else VECTOR
    net = make_actor_critic(NetworkConfig(name=name), spec, Categorical(spec.num_actions))
    assert isinstance(net.torso, MixedPrecision) is mixed


def test_a_bfloat16_checkpoint_restores_into_a_float32_network(tmp_path):
    # auto may pick bfloat16 where a run trained (a TPU) and float32 where its policy is
    # evaluated (a laptop): both hold the same float32 variables, named the same way.
    mixed = make_actor_critic(
        NetworkConfig(name="nature_cnn", precision="bfloat16"), PONG, Categorical(6)
    )
    full = make_actor_critic(
        NetworkConfig(name="nature_cnn", precision="float32"), PONG, Categorical(6)
    )
    prefix = tf.train.Checkpoint(**tracked({"network": mixed})).write(str(tmp_path / "ckpt"))
    tf.train.Checkpoint(**tracked({"network": full})).read(prefix).assert_consumed()
    for a, b in zip(mixed.trainable_variables, full.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
