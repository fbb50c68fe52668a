"""Atari games through ale-py with the standard preprocessing (``spec.env.atari``).

The pipeline, in order: the raw emulator at one frame per step with sticky actions done by ALE
itself (Machado et al. 2018); gymnasium's ``AtariPreprocessing`` for the no-op starts, the frame
skip with a max over the last two frames, the resize and the grayscale; then a channels-last
frame stack, so a convolutional network reads observations as [H, W, C] uint8 with no transpose.
Rewards are left as the game gives them: clipping is the learner's business, so the returns the
actors report are the game's own scores.

Lost lives: with ``terminalOnLifeLoss`` gymnasium ends the episode and resets the whole game on
each lost life (episodes and returns are then per life). With ``lifeLossTerminal`` a lost life
ends the learner's episode while the game goes on (:class:`LifeLossTerminal`).
"""

from __future__ import annotations

import collections

import cv2
import gymnasium as gym
import numpy as np

from seedrl.common.config import ATARI_PREFIX, AtariConfig

#: Set in a step's info when a terminal step leaves the game running (see actors/envs.py, which
#: reads it for any env).
GAME_CONTINUES = "seedrl.game_continues"


def is_atari(env_id: str) -> bool:
    """Whether an environment id names an ALE game."""
    return env_id.startswith(ATARI_PREFIX)


class ChannelStack(gym.ObservationWrapper):
    """Stacks the last ``num_frames`` observations along the last axis, oldest first.

    A frame [H, W] or [H, W, C] becomes [H, W, num_frames * C]. After a reset every slot holds
    the first frame, as in the DQN papers. Interleaving frames into channels-last order is a
    strided copy; OpenCV's ``merge`` does it about 30 times faster than shifting a numpy array
    (4 us against 120 us per step for 84x84x4, a tenth of a Pong step), hence cv2 here.

    Args:
      env: the wrapped environment, with a uint8 Box observation space.
      num_frames: how many frames to keep.
    """

    def __init__(self, env: gym.Env, num_frames: int):
        super().__init__(env)
        space = env.observation_space
        frame_shape = space.shape if len(space.shape) == 3 else space.shape + (1,)
        shape = frame_shape[:-1] + (frame_shape[-1] * num_frames,)
        self.observation_space = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        self._frames: collections.deque = collections.deque(maxlen=num_frames)

    def _stacked(self) -> np.ndarray:
        # merge() drops a single channel axis; put it back (a view, no copy).
        return cv2.merge(list(self._frames)).reshape(self.observation_space.shape)

    def reset(self, **kwargs):
        """Resets the game and fills every slot with its first frame."""
        obs, info = self.env.reset(**kwargs)
        frame = np.ascontiguousarray(obs)
        self._frames.extend([frame] * self._frames.maxlen)
        return self._stacked(), info

    def observation(self, observation):
        """Drops the oldest frame and appends the newest."""
        self._frames.append(np.ascontiguousarray(observation))
        return self._stacked()


class LifeLossTerminal(gym.Wrapper):
    """Marks each lost life that does not end the game as terminal for the learner only.

    The step that loses a life returns ``terminated=True`` with ``info[GAME_CONTINUES]``, so the
    actor's :class:`~seedrl.actors.envs.EnvBatch` keeps playing the same game (no reset, the
    episode and its return go on) while the learner cuts returns and restarts its recurrent
    state there: the usual "life loss ends the training episode, not the game".
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def reset(self, **kwargs):
        """Resets the game and remembers its lives."""
        obs, info = self.env.reset(**kwargs)
        self._lives = self._ale_lives()
        return obs, info

    def step(self, action):
        """Steps; a lost life with the game still on reads as terminal, flagged to go on."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self._ale_lives()
        if lives < self._lives and not terminated and not truncated:
            terminated = True
            info = {**info, GAME_CONTINUES: True}
        self._lives = lives
        return obs, reward, terminated, truncated, info


def make_atari(
    env_id: str, config: AtariConfig, options: dict, max_episode_steps: int | None = None
) -> gym.Env:
    """Creates an ALE game with the standard preprocessing.

    Args:
      env_id: an ``ALE/Game-v5`` id.
      config: ``spec.env.atari``.
      options: ``spec.env.options``, passed to the ALE environment (for example ``mode`` or
        ``difficulty``); the preprocessing keys are set from ``config`` and may not be repeated
        here.
      max_episode_steps: a limit in agent steps, or None for ALE's own (108,000 frames).

    Raises:
      ValueError: if the game is unknown or options repeat a preprocessing setting.
    """
    import ale_py  # Imported here so that actors for other envs do not pay for it.

    gym.register_envs(ale_py)
    clash = {
        "frameskip",
        "repeat_action_probability",
        "full_action_space",
        "obs_type",
    } & set(options)
    if clash:
        raise ValueError(
            f"spec.env.options: {sorted(clash)} are set by spec.env.atari for "
            f"{env_id}; set them there"
        )
    # ALE skips no frames itself: AtariPreprocessing does, so it can max-pool the last two.
    env = gym.make(
        env_id,
        frameskip=1,
        # The emulator's own per-frame observation is thrown away (AtariPreprocessing reads
        # the screen itself, on the two frames it pools): grayscale makes it a third of the
        # RGB copy, which was 12.6% of a Pong actor's profile.
        obs_type="grayscale" if config.grayscale else "rgb",
        repeat_action_probability=config.sticky_action_probability,
        full_action_space=config.full_action_space,
        **options,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        terminal_on_life_loss=config.terminal_on_life_loss,
        grayscale_obs=config.grayscale,
        grayscale_newaxis=False,
        scale_obs=False,
    )
    if config.life_loss_terminal:
        env = LifeLossTerminal(env)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    # Always wrapped, even for one frame: networks read [H, W, C] with a channel axis.
    return ChannelStack(env, config.frame_stack)
