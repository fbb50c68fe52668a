"""PPO loss math and the streaming normalizer against NumPy."""

import numpy as np
import pytest

from seedrl.learner.agents.ppo import losses
from seedrl.learner.normalizers import RunningMeanStd


def np_gae(rewards, values, bootstrap, discounts, lam):
    t_len = len(rewards)
    adv = np.zeros_like(rewards)
    for b in range(rewards.shape[1]):
        acc = 0.0
        for t in reversed(range(t_len)):
            next_v = bootstrap[b] if t == t_len - 1 else values[t + 1, b]
            delta = rewards[t, b] + discounts[t, b] * next_v - values[t, b]
            acc = delta + discounts[t, b] * lam * acc
            adv[t, b] = acc
    return adv


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_matches_numpy_with_episode_ends_and_truncation(lam):
    rng = np.random.default_rng(0)
    t_len, b_len, gamma = 9, 4, 0.99
    rewards = rng.normal(size=(t_len, b_len)).astype(np.float32)
    values = rng.normal(size=(t_len, b_len)).astype(np.float32)
    bootstrap = rng.normal(size=b_len).astype(np.float32)
    done = np.zeros((t_len, b_len), bool)
    done[2, 0] = done[5, 1] = done[8, 3] = True
    cut = np.zeros((t_len, b_len), bool)
    cut[5, 1] = True  # a time limit: ends the trace but bootstraps from V(final observation)
    final_values = np.zeros((t_len, b_len), np.float32)
    final_values[5, 1] = 37.0
    discounts = gamma * (1.0 - done)
    r = losses.bootstrap_truncations(rewards, final_values, cut, gamma).numpy()
    want_r = rewards.copy()
    want_r[5, 1] += gamma * 37.0
    np.testing.assert_allclose(r, want_r, rtol=1e-6)
    got = losses.gae(r, values, bootstrap, discounts, lam)
    want = np_gae(want_r.astype(np.float64), values, bootstrap, discounts, lam)
    np.testing.assert_allclose(got.advantages, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.returns, want + values, rtol=1e-5, atol=1e-5)
    # Nothing crosses an episode end: A_2 of env 0 is its own one-step delta.
    assert got.advantages.numpy()[2, 0] == pytest.approx(r[2, 0] - values[2, 0], rel=1e-5)


def test_clipped_surrogate():
    log_ratio = np.log(np.array([0.5, 1.0, 1.5, 1.5], np.float32))
    adv = np.array([1.0, 2.0, 1.0, -1.0], np.float32)
    # min(r A, clip(r) A) with c = 0.2: [0.5, 2.0, 1.2, -1.5]
    assert losses.clipped_surrogate_loss(log_ratio, adv, 0.2).numpy() == pytest.approx(
        -np.mean([0.5, 2.0, 1.2, -1.5]), rel=1e-6
    )
    assert losses.clipped_surrogate_loss(log_ratio, adv, 0.0).numpy() == pytest.approx(
        -np.mean([0.5, 2.0, 1.5, -1.5]), rel=1e-6
    )


def test_kl_penalty_and_its_cutoff():
    kl = np.array([0.01, 0.02, 0.05], np.float32)
    got = losses.kl_penalty_loss(kl, 2.0, target=0.01, cutoff_factor=2.0, cutoff_coefficient=1000.0)
    want = 2.0 * kl.mean() + 1000.0 * np.mean(np.maximum(kl - 0.02, 0.0) ** 2)
    assert got.numpy() == pytest.approx(want, rel=1e-5)


def test_batchppo_cuts_off_on_each_sequences_mean_kl():
    # [T=3, B=2]: sequence 0 has one sample past the cutoff (0.02) but a mean below it;
    # sequence 1's mean is past it.
    kl = np.array([[0.05, 0.03], [0.0, 0.03], [0.0, 0.03]], np.float32)
    per_sample = losses.kl_penalty_loss(kl, 1.0, 0.01, 2.0, 1000.0)
    per_sequence = losses.kl_penalty_loss(kl, 1.0, 0.01, 2.0, 1000.0, per_sequence=True)
    assert per_sample.numpy() == pytest.approx(
        kl.mean() + 1000.0 * np.mean(np.maximum(kl - 0.02, 0.0) ** 2), rel=1e-5
    )
    assert per_sequence.numpy() == pytest.approx(
        kl.mean() + 1000.0 * np.mean([0.0, (0.03 - 0.02) ** 2]), rel=1e-5
    )


def test_batchppos_penalty_band_is_0_7_to_1_3_of_the_target():
    low, high = losses.BATCHPPO_KL_BAND
    assert (low, high) == (0.7, 1.3)
    for kl, want in [(0.0072, 1.0), (0.0069, 1 / 1.5), (0.0131, 1.5), (0.0129, 1.0)]:
        got = losses.updated_kl_coefficient(
            1.0, kl, 0.01, tolerance=high, lower=low, bounds=(0.0, float("inf"))
        )
        assert got == pytest.approx(want), kl
    # The clip preset's band is [target / 1.3, 1.3 target]: 0.0072 is below it.
    assert losses.updated_kl_coefficient(1.0, 0.0072, 0.01) == pytest.approx(1 / 1.5)


def test_kl_coefficient_adapts_to_the_measured_kl():
    assert losses.updated_kl_coefficient(1.0, 0.02, 0.01) == pytest.approx(1.5)
    assert losses.updated_kl_coefficient(1.0, 0.005, 0.01) == pytest.approx(1 / 1.5)
    assert losses.updated_kl_coefficient(1.0, 0.011, 0.01) == 1.0
    assert losses.updated_kl_coefficient(1e5, 1.0, 0.01) == 1e5
    assert losses.updated_kl_coefficient(1e-5, 0.0, 0.01) == 1e-5


def test_running_mean_std_matches_numpy_over_many_batches():
    rng = np.random.default_rng(1)
    rms = RunningMeanStd((3,), clip=0.0)
    seen = []
    for _ in range(50):
        batch = rng.normal(
            loc=[1.0, -5.0, 100.0], scale=[0.1, 2.0, 30.0], size=(int(rng.integers(0, 40)), 3)
        )
        rms.update(batch)
        seen.append(batch)
    data = np.concatenate(seen)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-9)
    np.testing.assert_allclose(rms.variance.numpy(), data.var(0), rtol=1e-9)
    x = rng.normal(size=(5, 3))
    np.testing.assert_allclose(
        rms.normalize(x), (x - data.mean(0)) / np.sqrt(data.var(0)), rtol=1e-4, atol=1e-5
    )


def test_normalizer_clips_and_is_a_no_op_before_data():
    rms = RunningMeanStd((), clip=5.0)
    np.testing.assert_allclose(rms.normalize(np.array([3.0, -2.0])), [3.0, -2.0], rtol=1e-6)
    rms.update(np.array([0.0, 2.0]))
    assert rms.normalize(np.array([100.0])).numpy()[0] == 5.0
    np.testing.assert_allclose(rms.normalize(np.array([2.0]), center=False), [2.0], rtol=1e-5)
