"""Action distributions against closed forms computed with NumPy."""

import math

import numpy as np
import pytest
import tensorflow as tf

from seedrl.common.wire import EnvSpec
from seedrl.learner import distributions
from seedrl.learner.distributions import Categorical, DiagGaussian


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_categorical_log_prob_and_entropy_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 7, 4)).astype(np.float32) * 3
    actions = rng.integers(0, 4, size=(5, 7))
    dist = Categorical(4)
    log_p = _np_log_softmax(logits.astype(np.float64))
    want = np.take_along_axis(log_p, actions[..., None], -1)[..., 0]
    np.testing.assert_allclose(dist.log_prob(logits, actions), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        dist.entropy(logits), -(np.exp(log_p) * log_p).sum(-1), rtol=1e-5, atol=1e-5
    )


def test_categorical_samples_follow_the_probabilities():
    dist = Categorical(3)
    logits = tf.math.log(tf.constant([[0.7, 0.2, 0.1]] * 20000))
    actions = dist.sample(logits, tf.constant([1, 2])).numpy()
    assert actions.dtype == np.int32
    np.testing.assert_allclose(
        np.bincount(actions, minlength=3) / 20000, [0.7, 0.2, 0.1], atol=0.015
    )
    assert dist.mode(logits).numpy().tolist() == [0] * 20000


def test_gaussian_log_prob_matches_the_closed_form():
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(6, 3))
    log_std = rng.normal(size=(6, 3)) * 0.5
    actions = rng.normal(size=(6, 3)) * 2
    params = np.concatenate([mean, log_std], -1).astype(np.float32)
    std = np.exp(log_std)
    want = (-0.5 * ((actions - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)).sum(
        -1
    )
    got = DiagGaussian(3).log_prob(params, actions.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gaussian_entropy_matches_the_closed_form():
    log_std = np.array([[-1.0, 0.0, 0.5], [0.2, 0.3, -2.0]])
    params = np.concatenate([np.zeros_like(log_std), log_std], -1).astype(np.float32)
    want = (0.5 * np.log(2 * math.pi * math.e * np.exp(log_std) ** 2)).sum(-1)
    np.testing.assert_allclose(DiagGaussian(3).entropy(params), want, rtol=1e-6)


def test_gaussian_samples_have_the_mean_and_std():
    dist = DiagGaussian(2)
    params = tf.constant([[0.5, -1.0, math.log(0.3), math.log(2.0)]] * 40000)
    x = dist.sample(params, tf.constant([3, 4])).numpy()
    assert x.shape == (40000, 2) and x.dtype == np.float32
    np.testing.assert_allclose(x.mean(0), [0.5, -1.0], atol=0.04)
    np.testing.assert_allclose(x.std(0), [0.3, 2.0], rtol=0.03)
    np.testing.assert_allclose(dist.mode(params)[0], [0.5, -1.0])


def test_for_env_picks_by_action_space():
    assert isinstance(
        distributions.for_env(EnvSpec("a", "float32", (4,), "int32", (), 2)), Categorical
    )
    gauss = distributions.for_env(EnvSpec("b", "float32", (17,), "float32", (6,), 0))
    assert isinstance(gauss, DiagGaussian) and gauss.param_size == 12
    with pytest.raises(ValueError, match="must be a vector"):
        distributions.for_env(EnvSpec("c", "float32", (4,), "float32", (2, 3), 0))


def test_kl_divergences_match_closed_forms():
    rng = np.random.default_rng(5)
    p, q = rng.normal(size=(2, 7, 4)).astype(np.float32)
    lp, lq = _np_log_softmax(p.astype(np.float64)), _np_log_softmax(q.astype(np.float64))
    np.testing.assert_allclose(
        Categorical(4).kl(p, q), (np.exp(lp) * (lp - lq)).sum(-1), rtol=1e-4, atol=1e-6
    )
    mp, mq = rng.normal(size=(2, 5, 3))
    sp, sq = np.exp(rng.normal(size=(2, 5, 3)) * 0.3)
    want = (np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5).sum(-1)
    got = DiagGaussian(3).kl(
        np.concatenate([mp, np.log(sp)], -1).astype(np.float32),
        np.concatenate([mq, np.log(sq)], -1).astype(np.float32),
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.allclose(
        DiagGaussian(3).kl(np.ones((2, 6), np.float32), np.ones((2, 6), np.float32)), 0.0
    )
