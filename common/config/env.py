"""The environment the actors step (``spec.env``): its id and options, Atari's preprocessing,
Google Research Football's settings, and which backend steps Atari games
(:func:`envpool_problems`: when envpool can).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from seedrl.common.config.fields import param


#: Environment ids of Atari games (ale-py's), whose agent steps skip emulator frames.
ATARI_PREFIX = "ALE/"
#: What steps the actors' Atari envs (``spec.env.backend``).
ENV_BACKENDS = ("auto", "gymnasium", "envpool")
#: The ``spec.env.options`` envpool's Atari envs take (ale-py's game mode and difficulty).
ENVPOOL_OPTIONS = ("mode", "difficulty")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AtariConfig:
    """Preprocessing of Atari games (``spec.env.atari``), used for ids of the form ``ALE/Game-v5``.

    The defaults are the standard ones: Mnih et al. (2015) for frames, Machado et al. (2018) for
    sticky actions and for not ending episodes on a lost life.
    """

    noop_max: int = param(30, "Up to this many no-op actions after each reset (0 disables).", ge=0)
    frame_skip: int = param(
        4,
        "Emulator frames per agent step; the observation is the max over the last two of them.",
        ge=1,
    )
    screen_size: int = param(84, "Frames are resized to screenSize x screenSize.", ge=16)
    grayscale: bool = param(True, "Grayscale frames (one channel) instead of RGB.")
    frame_stack: int = param(
        4, "Observations stack this many consecutive frames (1 disables).", ge=1
    )
    sticky_action_probability: float = param(
        0.25,
        "Probability that the emulator repeats the previous action instead of the new "
        "one, per frame.",
        ge=0.0,
        le=1.0,
    )
    full_action_space: bool = param(False, "All 18 actions instead of the game's minimal set.")
    terminal_on_life_loss: bool = param(
        False,
        "gymnasium's terminal_on_life_loss: a lost life ends the episode and resets the "
        "whole game, so episodes, their returns and targetReturn become per life, not "
        "per game. lifeLossTerminal is usually what is meant.",
    )
    life_loss_terminal: bool = param(
        False,
        "A lost life is a terminal state for the learner (no bootstrap across it, the "
        "recurrent state restarts) while the game goes on from where it was: episodes "
        "and their returns stay whole games. The usual DQN-paper setting.",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class FootballConfig:
    """Google Research Football settings (``spec.env.football``), used for ids of the form
    ``Football/<scenario>``, e.g. ``Football/academy_empty_goal_close``."""

    representation: str = param(
        "simple115v2",
        "Observation: 'simple115v2' (a 115-float vector) or 'extracted' (the "
        "super-minimap, 72x96 uint8 planes).",
        choices=("simple115v2", "extracted"),
    )
    rewards: str = param(
        "scoring",
        "Reward: 'scoring' (goals) or 'scoring,checkpoints' (also "
        "for carrying the ball towards the goal).",
        choices=("scoring", "scoring,checkpoints"),
    )
    stacked: bool = param(False, "Stack the last 4 observations along the last axis.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """Which environment the actors step (``spec.env``)."""

    id: str = param("CartPole-v1", "A gymnasium environment id, e.g. CartPole-v1.", max_len=256)
    options: dict[str, Any] = param(
        doc="Keyword arguments passed to gymnasium.make for this environment.", factory=dict
    )
    imports: list[str] = param(
        doc="Python modules imported before the environment is made, so that a package of your "
        "own can register its environments with gymnasium.",
        factory=list,
    )
    max_episode_steps: Optional[int] = param(
        None,
        "Truncate episodes after this many steps; null keeps the environment's own limit.",
        ge=1,
    )
    atari: AtariConfig = param(doc="Atari preprocessing, for ALE/ ids.", factory=AtariConfig)
    football: FootballConfig = param(
        doc="Google Research Football settings, for Football/ ids.", factory=FootballConfig
    )
    backend: str = param(
        "auto",
        "What steps an actor's batch of Atari envs: 'gymnasium' (ale-py with gymnasium's "
        "AtariPreprocessing, one env at a time in Python), 'envpool' (envpool's C++ thread "
        "pool: the same emulator and preprocessing, a whole batch per call, no Python per "
        "env), or 'auto': envpool where it is installed and gives the same observations "
        "(an ALE/ id with noopMax >= 1, frameSkip >= 2 and no options but mode and "
        "difficulty), gymnasium otherwise. Other envs always step through gymnasium.",
        choices=ENV_BACKENDS,
    )
    max_abs_reward: float = param(
        1e6,
        "Largest |reward| of one env step the learner accepts from an actor, and so "
        "|return| <= maxAbsReward x length for an episode it reports: a step or episode "
        "beyond it fails that actor's stream (gymnasium envs declare no reward range). "
        "Raise it for an env with larger rewards.",
        gt=0.0,
    )

    @property
    def is_atari(self) -> bool:
        """Whether ``id`` names an Atari game (``ALE/Pong-v5``)."""
        return self.id.startswith(ATARI_PREFIX)

    @property
    def frames_per_step(self) -> int:
        """Emulator frames per agent step: Atari's frame skip (SEED's and IMPALA's "frames"
        count skipped frames), else 1. Frame counts in metrics, cost and benchmarks use it."""
        return self.atari.frame_skip if self.is_atari else 1


def envpool_problems(env: EnvConfig) -> list[tuple[str, str]]:
    """Why envpool cannot step ``spec.env`` with the same observations as gymnasium, as
    (field path, reason) pairs; empty when it can (as far as the document tells: whether
    envpool is installed and knows the game is for the actor to find out)."""
    problems = []
    if not env.is_atari:
        problems.append(
            (
                "spec.env.backend",
                f"envpool steps only Atari games ({ATARI_PREFIX}...), not {env.id}",
            )
        )
        return problems
    if env.atari.noop_max < 1:
        # envpool always plays at least one no-op after a reset.
        problems.append(("spec.env.atari.noopMax", "envpool needs noopMax >= 1, got 0"))
    if env.atari.frame_skip < 2:
        # envpool max-pools the last two frames even of a single-frame step (the older one
        # left over from the step before), where gymnasium pools nothing.
        problems.append(("spec.env.atari.frameSkip", "envpool needs frameSkip >= 2, got 1"))
    others = sorted(set(env.options) - set(ENVPOOL_OPTIONS))
    if others:
        problems.append(
            (
                "spec.env.options",
                f"envpool takes only {', '.join(ENVPOOL_OPTIONS)}, not {', '.join(others)}",
            )
        )
    return problems
