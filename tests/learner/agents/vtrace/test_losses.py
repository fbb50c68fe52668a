"""Tests for seedrl.learner.agents.vtrace.losses against a NumPy ground truth.

The ground truth evaluates the V-trace target with the explicit sum from
the IMPALA paper (Espeholt et al. 2018, eq. 1),

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{k=s}^{t-1} gamma_k)
                                   (prod_{i=s}^{t-1} c_i) delta_t V,

as a double loop over time, rather than the backward recursion used by the
implementation, so that a mistake in the recursion is caught.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from seedrl.learner.agents.vtrace import losses
from support import vtrace_logits as logit_losses

# float32 results against a float64 ground truth of the same formula, on one fixed order of
# operations (no comparison of two summation orders): the recursion over T <= 11 steps and the
# log-softmax over A <= 6 actions each add a few units of float32's roundoff u = 2**-24 per
# step, so the error stays below ~2 (T + A) u = 2e-6 relative for terms of order one; 1e-5
# leaves room for products of clipped importance weights.
ATOL = 1e-5
RTOL = 1e-5


# --------------------------------------------------------------------------
# NumPy ground truth (float64)
# --------------------------------------------------------------------------


def np_log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def np_action_log_probs(logits, actions):
    lp = np_log_softmax(logits)
    return np.take_along_axis(lp, actions[..., None].astype(np.int64), axis=-1)[..., 0]


def np_vtrace(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    lambda_=1.0,
):
    """V-trace from the explicit-sum definition. Inputs [T, B] / [B]."""
    log_rhos = np.asarray(log_rhos, np.float64)
    discounts = np.asarray(discounts, np.float64)
    rewards = np.asarray(rewards, np.float64)
    values = np.asarray(values, np.float64)
    bootstrap_value = np.asarray(bootstrap_value, np.float64)
    T, B = values.shape

    rhos = np.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else np.minimum(clip_rho_threshold, rhos)
    pg_rhos = rhos if clip_pg_rho_threshold is None else np.minimum(clip_pg_rho_threshold, rhos)
    cs = lambda_ * np.minimum(1.0, rhos)

    values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)  # [T+1, B]
    vs = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total = values[s, b]
            for t in range(s, T):
                gamma_prod = np.prod(discounts[s:t, b])  # empty product = 1
                c_prod = np.prod(cs[s:t, b])
                delta_t = clipped_rhos[t, b] * (
                    rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values[t, b]
                )
                total += gamma_prod * c_prod * delta_t
            vs[s, b] = total

    vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
    pg_adv = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            pg_adv[s, b] = pg_rhos[s, b] * (
                rewards[s, b] + discounts[s, b] * vs_ext[s + 1, b] - values[s, b]
            )
    return vs, pg_adv


def np_n_step_returns(discounts, rewards, bootstrap_value):
    """G_s = sum_{t=s}^{T-1} (prod_{k<t} gamma_k) r_t + (prod gamma) V(x_T)."""
    T, B = rewards.shape
    out = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            g, disc = 0.0, 1.0
            for t in range(s, T):
                g += disc * rewards[t, b]
                disc *= discounts[t, b]
            out[s, b] = g + disc * bootstrap_value[b]
    return out


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def make_batch(seed, T=7, B=4, A=5, gamma=0.9, done_prob=0.2, logit_scale=1.0):
    rng = np.random.RandomState(seed)
    behaviour_logits = (logit_scale * rng.randn(T, B, A)).astype(np.float32)
    target_logits = (logit_scale * rng.randn(T, B, A)).astype(np.float32)
    actions = rng.randint(0, A, size=(T, B)).astype(np.int32)
    dones = rng.rand(T, B) < done_prob
    discounts = (gamma * (1.0 - dones)).astype(np.float32)
    rewards = rng.randn(T, B).astype(np.float32)
    values = rng.randn(T, B).astype(np.float32)
    bootstrap_value = rng.randn(B).astype(np.float32)
    return dict(
        behaviour_policy_logits=behaviour_logits,
        target_policy_logits=target_logits,
        actions=actions,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
    )


def np_log_rhos(batch):
    return np_action_log_probs(batch["target_policy_logits"], batch["actions"]) - (
        np_action_log_probs(batch["behaviour_policy_logits"], batch["actions"])
    )


def vtrace_args(batch, log_rhos):
    return dict(
        log_rhos=log_rhos,
        discounts=batch["discounts"],
        rewards=batch["rewards"],
        values=batch["values"],
        bootstrap_value=batch["bootstrap_value"],
    )


THRESHOLDS = [None, 1.0, 0.5, 3.7]


# --------------------------------------------------------------------------
# log-probs
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_log_probs_match_numpy_log_softmax(dtype):
    rng = np.random.RandomState(0)
    logits = (3.0 * rng.randn(6, 3, 4)).astype(np.float32)
    actions = rng.randint(0, 4, size=(6, 3)).astype(dtype)
    got = logit_losses.log_probs_from_logits_and_actions(logits, actions)
    assert got.shape == (6, 3)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(
        got.numpy(), np_action_log_probs(logits, actions), rtol=RTOL, atol=ATOL
    )


# --------------------------------------------------------------------------
# V-trace
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "clip_rho,clip_pg_rho,lambda_",
    list(itertools.product(THRESHOLDS, THRESHOLDS, [1.0, 0.9])),
)
def test_vtrace_from_importance_weights_off_policy(clip_rho, clip_pg_rho, lambda_):
    batch = make_batch(seed=1)
    log_rhos = np_log_rhos(batch).astype(np.float32)
    # Make sure the data really is off-policy and exercises every threshold.
    rhos = np.exp(log_rhos)
    assert rhos.min() < 0.5 and rhos.max() > 3.7

    got = losses.vtrace_from_importance_weights(
        **vtrace_args(batch, log_rhos),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
    )
    want_vs, want_adv = np_vtrace(
        **vtrace_args(batch, log_rhos),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
    )
    assert isinstance(got, losses.VTraceReturns)
    assert got.vs.shape == (7, 4) and got.pg_advantages.shape == (7, 4)
    assert got.vs.dtype == tf.float32 and got.pg_advantages.dtype == tf.float32
    np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_adv, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "clip_rho,clip_pg_rho,lambda_",
    [(1.0, 1.0, 1.0), (None, None, 0.9), (0.5, 3.7, 1.0), (3.7, 0.5, 0.9)],
)
def test_vtrace_from_logits_matches_ground_truth(clip_rho, clip_pg_rho, lambda_):
    batch = make_batch(seed=2, T=6, B=3, A=4)
    got = logit_losses.vtrace_from_logits(
        **batch,
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
    )
    log_rhos = np_log_rhos(batch)
    want_vs, want_adv = np_vtrace(
        **vtrace_args(batch, log_rhos),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
        lambda_=lambda_,
    )
    assert isinstance(got, logit_losses.VTraceFromLogitsReturns)
    np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_adv, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(
        got.behaviour_action_log_probs.numpy(),
        np_action_log_probs(batch["behaviour_policy_logits"], batch["actions"]),
        rtol=RTOL,
        atol=ATOL,
    )
    np.testing.assert_allclose(
        got.target_action_log_probs.numpy(),
        np_action_log_probs(batch["target_policy_logits"], batch["actions"]),
        rtol=RTOL,
        atol=ATOL,
    )


def test_ground_truth_sanity_single_step():
    # Hand-computed single step: v_0 = V + rho (r + gamma V_boot - V).
    vs, adv = np_vtrace(
        log_rhos=[[np.log(2.0)]],
        discounts=[[0.5]],
        rewards=[[1.0]],
        values=[[3.0]],
        bootstrap_value=[4.0],
        clip_rho_threshold=1.5,
        clip_pg_rho_threshold=None,
    )
    assert np.isclose(vs[0, 0], 3.0 + 1.5 * (1.0 + 2.0 - 3.0))
    assert np.isclose(adv[0, 0], 2.0 * (1.0 + 0.5 * 4.0 - 3.0))


def test_vtrace_episode_boundaries_inside_unroll():
    T, B = 8, 3
    batch = make_batch(seed=3, T=T, B=B, done_prob=0.0)
    discounts = batch["discounts"].copy()
    boundaries = {0: 2, 1: 5, 2: 0}  # column -> time step at which the episode ends
    for b, t in boundaries.items():
        discounts[t, b] = 0.0
    discounts[6, 0] = 0.0  # a second episode end in column 0
    batch["discounts"] = discounts
    log_rhos = np_log_rhos(batch).astype(np.float32)

    kwargs = dict(clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, lambda_=0.9)
    got = losses.vtrace_from_importance_weights(**vtrace_args(batch, log_rhos), **kwargs)
    want_vs, want_adv = np_vtrace(**vtrace_args(batch, log_rhos), **kwargs)
    np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_adv, rtol=RTOL, atol=ATOL)

    # Nothing after an episode end may influence targets up to that end.
    perturbed = dict(batch)
    rng = np.random.RandomState(33)
    rewards, values = batch["rewards"].copy(), batch["values"].copy()
    log_rhos_p = log_rhos.copy()
    for b, t in boundaries.items():
        rewards[t + 1 :, b] += rng.randn(T - t - 1).astype(np.float32) * 10
        values[t + 1 :, b] += rng.randn(T - t - 1).astype(np.float32) * 10
        log_rhos_p[t + 1 :, b] += rng.randn(T - t - 1).astype(np.float32)
    perturbed.update(
        rewards=rewards,
        values=values,
        bootstrap_value=batch["bootstrap_value"] + 100.0,
    )
    got_p = losses.vtrace_from_importance_weights(**vtrace_args(perturbed, log_rhos_p), **kwargs)
    for b, t in boundaries.items():
        np.testing.assert_allclose(
            got_p.vs.numpy()[: t + 1, b], got.vs.numpy()[: t + 1, b], rtol=RTOL, atol=ATOL
        )
        np.testing.assert_allclose(
            got_p.pg_advantages.numpy()[: t + 1, b],
            got.pg_advantages.numpy()[: t + 1, b],
            rtol=RTOL,
            atol=ATOL,
        )
        # At the terminal step the target is the (clipped-rho weighted) reward.
        rho = min(1.0, float(np.exp(log_rhos[t, b])))
        np.testing.assert_allclose(
            got.vs.numpy()[t, b],
            batch["values"][t, b] + rho * (batch["rewards"][t, b] - batch["values"][t, b]),
            rtol=RTOL,
            atol=ATOL,
        )


@pytest.mark.parametrize("clip_rho,clip_pg_rho", [(1.0, 1.0), (None, None), (3.7, 0.5)])
def test_on_policy_reduces_to_n_step_returns(clip_rho, clip_pg_rho):
    batch = make_batch(seed=4, T=9, B=5, done_prob=0.25)
    log_rhos = np.zeros_like(batch["rewards"])  # pi == mu
    got = losses.vtrace_from_importance_weights(
        **vtrace_args(batch, log_rhos),
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
    )
    returns = np_n_step_returns(batch["discounts"], batch["rewards"], batch["bootstrap_value"])
    np.testing.assert_allclose(got.vs.numpy(), returns, rtol=RTOL, atol=ATOL)
    # Advantage: r_s + gamma_s G_{s+1} - V(x_s) = G_s - V(x_s).
    rho_pg = 1.0 if clip_pg_rho is None else min(1.0, clip_pg_rho)
    np.testing.assert_allclose(
        got.pg_advantages.numpy(),
        rho_pg * (returns - batch["values"]),
        rtol=RTOL,
        atol=ATOL,
    )


def test_on_policy_from_logits_equal_policies():
    batch = make_batch(seed=5, T=5, B=2)
    batch["behaviour_policy_logits"] = batch["target_policy_logits"]
    got = logit_losses.vtrace_from_logits(**batch)
    np.testing.assert_allclose(got.log_rhos.numpy(), 0.0, atol=ATOL)
    returns = np_n_step_returns(batch["discounts"], batch["rewards"], batch["bootstrap_value"])
    np.testing.assert_allclose(got.vs.numpy(), returns, rtol=RTOL, atol=ATOL)


def test_vtrace_in_tf_function_with_unknown_shapes():
    spec2 = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec2, spec2, spec2, spec2, tf.TensorSpec([None], tf.float32)])
    def fn(log_rhos, discounts, rewards, values, bootstrap_value):
        out = losses.vtrace_from_importance_weights(
            log_rhos,
            discounts,
            rewards,
            values,
            bootstrap_value,
            clip_rho_threshold=3.7,
            clip_pg_rho_threshold=0.5,
            lambda_=0.9,
        )
        return out.vs, out.pg_advantages

    for seed, (T, B) in [(6, (5, 3)), (7, (11, 2))]:
        batch = make_batch(seed=seed, T=T, B=B)
        log_rhos = np_log_rhos(batch).astype(np.float32)
        vs, adv = fn(**vtrace_args(batch, log_rhos))
        want_vs, want_adv = np_vtrace(
            **vtrace_args(batch, log_rhos),
            clip_rho_threshold=3.7,
            clip_pg_rho_threshold=0.5,
            lambda_=0.9,
        )
        assert vs.shape == (T, B)
        np.testing.assert_allclose(vs.numpy(), want_vs, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(adv.numpy(), want_adv, rtol=RTOL, atol=ATOL)
    assert fn.experimental_get_tracing_count() == 1


def test_vtrace_from_logits_in_tf_function_with_unknown_shapes():
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None, None], tf.float32),
            tf.TensorSpec([None, None, None], tf.float32),
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None], tf.float32),
        ]
    )
    def fn(*args):
        out = logit_losses.vtrace_from_logits(*args)
        return out.vs, out.pg_advantages

    for seed, (T, B, A) in [(8, (4, 3, 5)), (9, (6, 1, 3))]:
        batch = make_batch(seed=seed, T=T, B=B, A=A)
        vs, adv = fn(
            batch["behaviour_policy_logits"],
            batch["target_policy_logits"],
            batch["actions"],
            batch["discounts"],
            batch["rewards"],
            batch["values"],
            batch["bootstrap_value"],
        )
        want_vs, want_adv = np_vtrace(**vtrace_args(batch, np_log_rhos(batch)))
        np.testing.assert_allclose(vs.numpy(), want_vs, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(adv.numpy(), want_adv, rtol=RTOL, atol=ATOL)
    assert fn.experimental_get_tracing_count() == 1


# --------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------


def test_gradients():
    batch = make_batch(seed=10, T=5, B=3, A=4)
    T, B, A = batch["target_policy_logits"].shape
    target_logits = tf.Variable(batch["target_policy_logits"])
    values = tf.Variable(batch["values"])
    bootstrap = tf.Variable(batch["bootstrap_value"])
    inputs = dict(batch)

    with tf.GradientTape(persistent=True) as tape:
        inputs.update(target_policy_logits=target_logits, values=values, bootstrap_value=bootstrap)
        out = logit_losses.vtrace_from_logits(**inputs)
        pg = logit_losses.policy_gradient_loss(target_logits, batch["actions"], out.pg_advantages)
        bl = losses.baseline_loss(out.vs, values)
        total = pg + bl

    # V-trace outputs are targets: no gradient at all.
    for target in (out.vs, out.pg_advantages):
        grads = tape.gradient(target, [target_logits, values, bootstrap])
        assert all(g is None for g in grads)
    # log_rhos do depend on the target policy.
    assert tape.gradient(out.log_rhos, target_logits) is not None

    # policy_gradient_loss: gradient wrt logits only, matching the analytic form
    # d/dlogits [-log pi(a) * adv] = -(onehot(a) - softmax) * adv, averaged over T*B.
    g_pg_logits, g_pg_values = tape.gradient(pg, [target_logits, values])
    assert g_pg_values is None
    logits64 = batch["target_policy_logits"].astype(np.float64)
    probs = np.exp(np_log_softmax(logits64))
    onehot = np.eye(A)[batch["actions"]]
    adv = out.pg_advantages.numpy()[..., None]
    np.testing.assert_allclose(
        g_pg_logits.numpy(), -(onehot - probs) * adv / (T * B), rtol=1e-4, atol=ATOL
    )

    # baseline_loss: gradient wrt values only (vs is a constant target).
    g_bl_logits, g_bl_values = tape.gradient(bl, [target_logits, values])
    assert g_bl_logits is None
    np.testing.assert_allclose(
        g_bl_values.numpy(),
        -(out.vs.numpy() - batch["values"]) / (T * B),
        rtol=RTOL,
        atol=ATOL,
    )

    g_total = tape.gradient(total, [target_logits, values])
    assert all(g is not None and np.any(g.numpy() != 0) for g in g_total)
    del tape


def test_losses_stop_gradient_through_targets():
    vs = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    adv = tf.Variable([[0.5, -1.0], [2.0, 0.0]])
    values = tf.constant([[0.0, 1.0], [1.0, 0.0]])
    logits = tf.constant(np.random.RandomState(11).randn(2, 2, 3).astype(np.float32))
    actions = tf.constant([[0, 1], [2, 0]])
    with tf.GradientTape(persistent=True) as tape:
        bl = losses.baseline_loss(vs, values)
        pg = logit_losses.policy_gradient_loss(logits, actions, adv)
    assert tape.gradient(bl, vs) is None
    assert tape.gradient(pg, adv) is None
    del tape


# --------------------------------------------------------------------------
# Scalar losses
# --------------------------------------------------------------------------


def test_policy_gradient_and_baseline_loss_values():
    rng = np.random.RandomState(12)
    logits = rng.randn(4, 3, 6).astype(np.float32)
    actions = rng.randint(0, 6, size=(4, 3)).astype(np.int64)
    adv = rng.randn(4, 3).astype(np.float32)
    vs = rng.randn(4, 3).astype(np.float32)
    values = rng.randn(4, 3).astype(np.float32)

    pg = logit_losses.policy_gradient_loss(logits, actions, adv)
    assert pg.shape == ()
    np.testing.assert_allclose(
        pg.numpy(), np.mean(-np_action_log_probs(logits, actions) * adv), rtol=RTOL, atol=ATOL
    )
    bl = losses.baseline_loss(vs, values)
    assert bl.shape == ()
    np.testing.assert_allclose(
        bl.numpy(), 0.5 * np.mean((vs.astype(np.float64) - values) ** 2), rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize("num_actions", [1, 2, 7, 18])
def test_entropy_of_uniform_policy_is_log_num_actions(num_actions):
    logits = np.full((3, 2, num_actions), 1.234, np.float32)
    got = logit_losses.entropy_loss(logits)
    assert got.shape == ()
    np.testing.assert_allclose(got.numpy(), -np.log(num_actions), rtol=RTOL, atol=ATOL)


def test_entropy_loss_matches_numpy_and_is_minimized_by_uniform():
    rng = np.random.RandomState(13)
    logits = (2.0 * rng.randn(5, 4, 6)).astype(np.float32)
    lp = np_log_softmax(logits)
    want = np.mean(np.sum(np.exp(lp) * lp, axis=-1))
    got = logit_losses.entropy_loss(logits)
    np.testing.assert_allclose(got.numpy(), want, rtol=RTOL, atol=ATOL)
    assert got.numpy() > -np.log(6)  # non-uniform policy has lower entropy


def test_entropy_loss_finite_for_extreme_logits():
    logits = np.array([[[1000.0, -1000.0, 0.0]]], np.float32)
    got = logit_losses.entropy_loss(logits).numpy()
    assert np.isfinite(got)
    np.testing.assert_allclose(got, 0.0, atol=ATOL)


# --------------------------------------------------------------------------
# Reward clipping
# --------------------------------------------------------------------------

REWARDS = np.array([[-100.0, -3.0, -1.0, -0.5], [0.0, 0.25, 1.0, 2.0], [7.0, 50.0, -0.01, 1e4]])


def test_clip_rewards_none():
    got = losses.clip_rewards(REWARDS, "none")
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), REWARDS, rtol=RTOL)


def test_clip_rewards_abs_one():
    got = losses.clip_rewards(REWARDS, "abs_one")
    np.testing.assert_allclose(got.numpy(), np.clip(REWARDS, -1.0, 1.0), rtol=RTOL, atol=ATOL)


def test_clip_rewards_soft_asymmetric():
    got = losses.clip_rewards(REWARDS, "soft_asymmetric").numpy()
    squeezed = np.tanh(REWARDS / 5.0)
    want = 5.0 * np.where(REWARDS < 0, 0.3 * squeezed, squeezed)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # Saturation levels and sign/monotonicity.
    assert np.isclose(got[0, 0], -1.5, atol=1e-4) and np.isclose(got[2, 3], 5.0, atol=1e-4)
    assert got[1, 0] == 0.0
    flat = REWARDS.ravel()
    order = np.argsort(flat)
    assert np.all(np.diff(got.ravel()[order]) >= 0)


def test_clip_rewards_unknown_mode():
    with pytest.raises(ValueError):
        losses.clip_rewards(REWARDS, "sign")
