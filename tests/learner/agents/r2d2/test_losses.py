"""R2D2 loss math against NumPy written from the paper's equations."""

import numpy as np
import pytest
import tensorflow as tf

from seedrl.learner.agents.r2d2 import losses

EPS = 1e-3


def np_h(x):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + EPS * x


def np_h_inv(x):
    return np.sign(x) * (((np.sqrt(1 + 4 * EPS * (np.abs(x) + 1 + EPS)) - 1) / (2 * EPS)) ** 2 - 1)


def test_value_rescale_matches_the_formula():
    x = np.array([-1e4, -50.0, -1.0, -1e-3, 0.0, 0.5, 3.0, 400.0, 1e5])
    np.testing.assert_allclose(losses.value_rescale(x), np_h(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [1e-2, 1.0, 100.0, 1e4])
def test_inverse_is_exact(scale):
    x = np.random.default_rng(0).normal(size=1000).astype(np.float32) * scale
    back = losses.inverse_value_rescale(losses.value_rescale(x)).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-3 * max(1.0, scale / 100))
    y = np.linspace(-50, 50, 101).astype(np.float32)
    np.testing.assert_allclose(
        losses.value_rescale(losses.inverse_value_rescale(y)), y, rtol=1e-5, atol=1e-4
    )


def np_targets(q_online, q_target, rewards, discounts, n):
    """Straight from the definition, one (t, b) at a time: transition t of T - 1 looks
    m = min(n, T - 1 - t) steps ahead."""
    m_len, b_len = rewards.shape
    out = np.zeros((m_len, b_len))
    for b in range(b_len):
        for t in range(m_len):
            m = min(n, m_len - t)
            g, scale = 0.0, 1.0
            for k in range(m):
                g += scale * rewards[t + k, b]
                scale *= discounts[t + k, b]
            a = int(np.argmax(q_online[t + m, b]))
            g += scale * np_h_inv(q_target[t + m, b, a])
            out[t, b] = np_h(g)
    return out


@pytest.mark.parametrize("n", [1, 3, 5, 11, 20])
def test_n_step_double_q_targets_match_numpy_with_episode_ends(n):
    rng = np.random.default_rng(n)
    t_len, b_len, a_len = 12, 4, 3
    q_online = rng.normal(size=(t_len, b_len, a_len)).astype(np.float32)
    q_target = rng.normal(size=(t_len, b_len, a_len)).astype(np.float32) * 3
    rewards = rng.normal(size=(t_len - 1, b_len)).astype(np.float32)
    discounts = np.full((t_len - 1, b_len), 0.997, np.float32)
    discounts[4, 0] = discounts[7, 2] = discounts[0, 3] = discounts[10, 1] = 0.0  # ends
    got = losses.n_step_double_q_targets(q_online, q_target, rewards, discounts, n, EPS)
    want = np_targets(q_online, q_target, rewards, discounts, n)
    assert got.shape == (t_len - 1, b_len)  # every transition has a target
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_last_transitions_use_shorter_returns():
    # Three observations, two transitions, n = 5: the first looks 2 steps ahead, the last 1.
    q = np.array([[[0.0, 0.0]], [[0.0, 0.0]], [[4.0, 1.0]]], np.float32)
    rewards = np.array([[1.0], [2.0]], np.float32)
    discounts = np.array([[0.5], [0.5]], np.float32)
    got = losses.n_step_double_q_targets(q, q, rewards, discounts, 5, EPS)
    np.testing.assert_allclose(
        got[:, 0],
        [np_h(1.0 + 0.5 * 2.0 + 0.25 * np_h_inv(4.0)), np_h(2.0 + 0.5 * np_h_inv(4.0))],
        rtol=1e-5,
    )


def test_targets_use_the_online_argmax_and_the_target_value():
    # Online prefers action 1, target prefers action 0: double Q takes target[1].
    q_online = np.array([[[0.0, 0.0]], [[0.0, 5.0]]], np.float32)
    q_target = np.array([[[0.0, 0.0]], [[9.0, 2.0]]], np.float32)
    got = losses.n_step_double_q_targets(
        q_online, q_target, np.array([[1.0]]), np.array([[0.5]]), 1, EPS
    )
    np.testing.assert_allclose(got, [[np_h(1.0 + 0.5 * np_h_inv(2.0))]], rtol=1e-5)


def test_nothing_after_an_episode_end_leaks_in():
    rewards = np.array([[1.0], [100.0], [100.0]], np.float32)
    discounts = np.array([[0.0], [0.9], [0.9]], np.float32)
    q = np.full((4, 1, 2), 50.0, np.float32)
    got = losses.n_step_double_q_targets(q, q, rewards, discounts, 2, EPS)
    np.testing.assert_allclose(got[0], [np_h(1.0)], rtol=1e-6)


def test_targets_carry_no_gradient():
    q = tf.Variable(np.ones((4, 2, 3), np.float32))
    with tf.GradientTape() as tape:
        y = losses.n_step_double_q_targets(q, q, tf.ones([3, 2]), tf.ones([3, 2]), 2)
    assert tape.gradient(y, q) is None


def test_sequence_priorities_mix_max_and_mean():
    td = np.array([[1.0, -2.0], [-3.0, 0.5], [0.5, 0.5]], np.float32)
    want = 0.9 * np.abs(td).max(0) + 0.1 * np.abs(td).mean(0)
    np.testing.assert_allclose(losses.sequence_priorities(td, 0.9), want, rtol=1e-6)


def test_per_env_epsilons_are_seeds_schedule():
    n = 37
    eps = [losses.epsilon_for_env(i, n) for i in range(n)]
    np.testing.assert_allclose(eps, 0.4 ** np.linspace(1, 8, n), rtol=1e-12)
    assert losses.epsilon_for_env(0, 1) == pytest.approx(0.4)
