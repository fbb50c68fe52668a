"""Streaming normalization (learner/normalizers.py): the default formula and BatchPPO's."""

import numpy as np

from seedrl.learner.normalizers import RunningMeanStd

# float32's unit roundoff: normalize() computes in float32 from float64 statistics.
U = float(np.finfo(np.float32).eps) / 2


def _data(rng):
    """A near-constant feature (std 1e-3, as a feature that rarely moves) and an ordinary one."""
    return np.stack([rng.normal(0.0, 1e-3, 400), rng.normal(2.0, 3.0, 400)], axis=1)


def _check(rms, x, mean, std):
    # Each float32 cast (x, mean, std) and each operation rounds once: the difference x - mean
    # is within 2 U (|x| + |mean|), and the casts and the division add a few U of the result.
    want = (x - mean) / std
    tol = 2 * U * (np.abs(x) + np.abs(mean)) / std + 4 * U * np.abs(want)
    np.testing.assert_array_less(np.abs(rms.normalize(x).numpy() - want), tol)


def test_batchppos_normaliser_is_sqrt_of_the_sample_variance_plus_1e_4():
    rng = np.random.default_rng(0)
    data = _data(rng)
    rms = RunningMeanStd((2,), clip=0.0, epsilon=1e-4, ddof=1, std_epsilon=1e-8)
    for batch in np.array_split(data, 7):
        rms.update(batch)
    mean = data.mean(0)
    std = np.sqrt(data.var(0, ddof=1) + 1e-4) + 1e-8
    _check(rms, _data(rng)[:5], mean, std)
    # The near-constant feature's std is ~0.01 here, so its values stay ~0.1, where the
    # population formula (std ~1e-3) makes them ~1: the 1e-4 floor on the variance is BatchPPO's.
    assert rms.normalize(data).numpy()[:, 0].std() < 0.2
    population = RunningMeanStd((2,), clip=0.0)
    population.update(data)
    assert population.normalize(data).numpy()[:, 0].std() > 0.9


def test_batchppos_normaliser_only_centres_until_it_has_seen_two_samples():
    rms = RunningMeanStd((), clip=5.0, epsilon=1e-4, ddof=1, std_epsilon=1e-8)
    x = np.array([3.0, -2.0])
    np.testing.assert_array_equal(rms.normalize(x).numpy(), x.astype(np.float32))
    rms.update(np.array([1.0]))
    np.testing.assert_array_equal(rms.normalize(x).numpy(), (x - 1.0).astype(np.float32))
    rms.update(np.array([3.0]))  # sample variance 2: std sqrt(2 + 1e-4) + 1e-8
    want = (np.array([100.0, 3.0]) - 2.0) / (np.sqrt(2.0 + 1e-4) + 1e-8)
    got = rms.normalize(np.array([100.0, 3.0])).numpy()
    assert got[0] == 5.0  # clipped
    np.testing.assert_allclose(got[1], want[1], rtol=8 * U)
