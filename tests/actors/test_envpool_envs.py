"""envpool's Atari batches against the gymnasium/ale-py path: the same spaces, the same frames
step for step where the settings leave nothing to chance, and the same statistics where sticky
actions and no-op starts make every trajectory differ."""

import math

import numpy as np
import pytest

from seedrl.actors.envpool_envs import EnvpoolBatch, resolve_backend
from seedrl.actors.envs import EnvBatch, EnvsKeepFailing, probe_spec
from seedrl.actors.main import env_seeds, make_env_batches
from seedrl.common.config import AtariConfig, EnvConfig, load_experiment

pytest.importorskip("envpool")

#: No sticky actions and exactly one no-op frame after each reset (envpool always plays one):
#: nothing random is left, so both backends must give the same frames.
EXACT = dict(sticky_action_probability=0.0, noop_max=1)


def _pair(config: EnvConfig, k: int, seeds=None):
    seeds = seeds or env_seeds(7, 0, k)
    return EnvBatch(config, k, seeds), EnvpoolBatch(config, k, seeds)


def _play_side_by_side(config: EnvConfig, k: int, steps: int):
    """Steps both backends with the same random actions; asserts every result is equal and
    returns the episodes they reported."""
    gym_envs, pool = _pair(config, k)
    try:
        assert pool.spec == gym_envs.spec
        np.testing.assert_array_equal(pool.reset(), gym_envs.reset())
        rng = np.random.default_rng(0)
        episodes = []
        for t in range(steps):
            actions = rng.integers(0, pool.spec.num_actions, k, dtype=np.int32)
            want, got = gym_envs.step(actions), pool.step(actions)
            for name, w, g in zip(("obs", "reward", "terminated", "truncated"), want, got):
                np.testing.assert_array_equal(g, w, err_msg=f"{name} at step {t}")
                assert g.dtype == w.dtype, name
            assert got[4] == want[4], f"episodes at step {t}"
            np.testing.assert_array_equal(got[5][0], want[5][0])
            np.testing.assert_array_equal(got[5][1], want[5][1])
            episodes += got[4]
        return episodes
    finally:
        gym_envs.close()
        pool.close()


def test_pong_frames_rewards_and_truncations_match_gymnasium_step_for_step():
    # A time limit makes several episodes in a short run: truncation, its final observation
    # and the reset that follows are compared too.
    config = EnvConfig(id="ALE/Pong-v5", atari=AtariConfig(**EXACT), max_episode_steps=200)
    episodes = _play_side_by_side(config, 2, 450)
    assert len(episodes) == 4 and all(length == 200 for _, _, length in episodes)
    assert any(ret != 0 for _, ret, _ in episodes)  # points were scored in between


@pytest.mark.parametrize(
    "lives", [dict(life_loss_terminal=True), dict(terminal_on_life_loss=True)], ids=str
)
def test_breakout_game_overs_and_lost_lives_match_gymnasium(lives):
    # Breakout has 5 lives and random play loses them within a few hundred steps.
    config = EnvConfig(id="ALE/Breakout-v5", atari=AtariConfig(**EXACT, **lives))
    episodes = _play_side_by_side(config, 2, 300)
    assert episodes


def test_rgb_frames_other_stacks_sizes_and_the_full_action_space_match():
    atari = AtariConfig(
        **EXACT, grayscale=False, frame_stack=2, screen_size=64, full_action_space=True
    )
    config = EnvConfig(id="ALE/Pong-v5", atari=atari)
    gym_envs, pool = _pair(config, 2)
    try:
        assert pool.spec == gym_envs.spec == probe_spec(config)
        assert pool.spec.observation_shape == (64, 64, 6) and pool.spec.num_actions == 18
        np.testing.assert_array_equal(pool.reset(), gym_envs.reset())
        actions = np.array([3, 4], np.int32)
        for _ in range(20):
            np.testing.assert_array_equal(pool.step(actions)[0], gym_envs.step(actions)[0])
    finally:
        gym_envs.close()
        pool.close()


def _episode_stats(batch, k: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    batch.reset()
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(steps):
        episodes += batch.step(rng.integers(0, batch.spec.num_actions, k, dtype=np.int32))[4]
    batch.close()
    return np.array([r for _, r, _ in episodes]), np.array([n for _, _, n in episodes])


def test_default_settings_give_the_same_returns_and_lengths_within_their_spread():
    # Sticky actions (0.25) and up to 30 no-ops: the backends draw them from different random
    # streams, so only the distributions can agree. Random play on Breakout ends a game in ~200
    # steps; the means must agree within 4 standard errors of their difference.
    config = EnvConfig(id="ALE/Breakout-v5")
    k, steps = 8, 400
    gym_envs, pool = _pair(config, k)
    stats = {
        "gymnasium": _episode_stats(gym_envs, k, steps),
        "envpool": _episode_stats(pool, k, steps),
    }
    (ret_g, len_g), (ret_p, len_p) = stats["gymnasium"], stats["envpool"]
    assert len(ret_g) >= 10 and len(ret_p) >= 10
    for name, a, b in (("return", ret_g, ret_p), ("length", len_g, len_p)):
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        assert abs(a.mean() - b.mean()) <= 4 * se, (name, a.mean(), b.mean(), se)


def _frames_after(atari: AtariConfig, actions_of, steps: int = 20) -> np.ndarray:
    pool = EnvpoolBatch(EnvConfig(id="ALE/Pong-v5", atari=atari), 8, env_seeds(3, 0, 8))
    try:
        pool.reset()
        for t in range(steps):
            obs = pool.step(actions_of(t))[0]
        return obs
    finally:
        pool.close()


def test_noop_starts_differ_between_envs():
    # All envs play NOOP: only their no-op starts (drawn from their seeds) can set them apart.
    def noop(t):
        return np.zeros(8, np.int32)

    starts = _frames_after(AtariConfig(noop_max=30, sticky_action_probability=0.0), noop)
    assert len({o.tobytes() for o in starts}) > 1
    same = _frames_after(AtariConfig(noop_max=1, sticky_action_probability=0.0), noop)
    assert len({o.tobytes() for o in same}) == 1


def test_sticky_actions_reach_the_emulator():
    # Changing actions (a sticky one is the previous action, which then differs): with
    # sticky actions the same seeds and actions play out differently than without.
    actions = np.random.default_rng(0).integers(0, 6, (20, 8), dtype=np.int32)
    sticky = _frames_after(AtariConfig(noop_max=1), actions.__getitem__)
    still = _frames_after(
        AtariConfig(noop_max=1, sticky_action_probability=0.0), actions.__getitem__
    )
    assert not np.array_equal(sticky, still)


def test_reset_after_steps_replays_each_env_from_its_seed():
    config = EnvConfig(id="ALE/Pong-v5")
    pool = EnvpoolBatch(config, 3, env_seeds(1, 0, 3))
    try:
        actions = np.array([1, 2, 3], np.int32)

        def play():
            pool.reset()
            return [pool.step(actions)[0] for _ in range(30)]

        first, again = play(), play()
        np.testing.assert_array_equal(np.stack(first), np.stack(again))
    finally:
        pool.close()


def test_auto_picks_envpool_only_where_it_gives_the_same_observations():
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5")) == "envpool"
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5", backend="gymnasium")) == "gymnasium"
    assert resolve_backend(EnvConfig(id="CartPole-v1")) == "gymnasium"
    # envpool always plays a no-op after a reset and pools two frames of a one-frame step.
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5", atari=AtariConfig(noop_max=0))) == (
        "gymnasium"
    )
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5", atari=AtariConfig(frame_skip=1))) == (
        "gymnasium"
    )
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5", options={"mode": 1})) == "envpool"
    odd = EnvConfig(id="ALE/Pong-v5", options={"max_num_frames_per_episode": 1000})
    assert resolve_backend(odd) == "gymnasium"


def test_envpool_asked_for_where_it_cannot_serve_names_the_field():
    config = EnvConfig(id="ALE/Pong-v5", backend="envpool", atari=AtariConfig(noop_max=0))
    with pytest.raises(ValueError, match=r"spec\.env\.atari\.noopMax"):
        resolve_backend(config)
    with pytest.raises(ValueError, match=r"spec\.env\.atari\.noopMax"):
        probe_spec(config)  # what `seedrl validate` and the launcher's probe run
    with pytest.raises(ValueError, match=r"spec\.env\.id: envpool has no game"):
        resolve_backend(EnvConfig(id="ALE/NoSuchGame-v5", backend="envpool"))


def test_actor_batches_use_envpool_for_pong_with_its_seeds_and_threads():
    exp = load_experiment(
        "examples/pong-vtrace.yaml",
        ["spec.actors.envsPerActor=4", "spec.actors.streamsPerActor=2"],
    )
    batches = make_env_batches(exp, 1)
    try:
        assert [type(b) for b in batches] == [EnvpoolBatch, EnvpoolBatch]
        assert [b.num_envs for b in batches] == [2, 2]
        assert all(b.num_threads >= 1 for b in batches)
        # The same seeds as the gymnasium path would give these envs.
        assert batches[0]._seeds + batches[1]._seeds == env_seeds(exp.spec.seed, 1, 4)
    finally:
        for b in batches:
            b.close()


class _FailingPool(EnvpoolBatch):
    """A real pool whose next call raises once ``fail`` is set (what a broken pool does)."""

    fail = False

    def _call(self, env_ids, actions):
        if self.fail:
            self.fail = False
            raise RuntimeError("envpool broke")
        return super()._call(env_ids, actions)


def test_a_pool_that_raises_is_made_anew_and_its_envs_start_over():
    pool = _FailingPool(EnvConfig(id="ALE/Pong-v5"), 2, [1, 2])
    try:
        pool.reset()
        actions = np.array([2, 3], np.int32)
        pool.step(actions)
        pool.fail = True
        obs, rewards, terminated, truncated, episodes, (final_ids, finals) = pool.step(actions)
        assert truncated.all() and not terminated.any() and not rewards.any()
        assert episodes == [] and len(final_ids) == 0 and finals.shape == (0, 84, 84, 4)
        assert obs.shape == (2, 84, 84, 4)
        assert all(np.array_equal(obs[i, ..., 0], obs[i, ..., 3]) for i in range(2))  # fresh
        assert pool.restarts == 1 and "envpool broke" in pool.last_error
        pool.step(actions)  # goes on
    finally:
        pool.close()


def test_a_pool_that_keeps_raising_gives_up():
    pool = _FailingPool(EnvConfig(id="ALE/Pong-v5"), 1, [1])
    try:
        pool.reset()
        with pytest.raises(EnvsKeepFailing, match="envpool broke"):
            for _ in range(20):
                pool.fail = True
                pool.step(np.zeros(1, np.int32))
    finally:
        pool.close()
