"""Evaluate a trained policy: ``python -m seedrl.policy.evaluate LOCATION`` (``seedrl eval``).

Runs N episodes of the checkpoint's ``spec.env`` (or another env id with the same spaces) in
parallel envs, acting with :func:`seedrl.policy.load`'s policy on the whole batch at once; prints
the mean, std, min and max of the returns and lengths; writes them with every episode's return
and length to a JSON file; optionally records the first episodes as a video.

Why here, in ``seedrl.policy`` rather than the learner or the actors: evaluating needs both the
policy (TensorFlow, the learner's code) and the environments exactly as the actors make them
(``spec.env`` with Atari's preprocessing, a user's ``imports``...). The learner and the actors
never import each other, and their images each lack half (the actor image has no TensorFlow,
the learner image no environments), so the evaluator sits above both, like the CLI, in the
package that only a full install (a laptop, a notebook) has.

Episode j (0-based) starts from ``reset(seed=seed + j)``, whichever env plays it, so a run is
reproducible whatever the number of parallel envs. The recurrent state and the reward input
restart at each episode's first step, as the learner's inference restarts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from seedrl.actors.envs import GAME_CONTINUES, make_env, spec_of
from seedrl.actors.football import is_football
from seedrl.common import finite_json
from seedrl.common.config import EnvConfig
from seedrl.common.exit_codes import ExitCode
from seedrl.learner.policy import Policy, PolicyError, load

#: Parallel envs by default: enough to batch inference, few enough for a laptop's cores.
DEFAULT_ENVS = 8
#: Video formats written, by file suffix (mp4 through imageio-ffmpeg, gif through Pillow).
VIDEO_SUFFIXES = (".mp4", ".gif")


class EvalError(RuntimeError):
    """The evaluation cannot run as asked (one line, for people)."""


@dataclasses.dataclass
class _Slot:
    """One parallel env and the episode it is playing (None: done, nothing left to start)."""

    env: gym.Env
    episode: int | None = None
    ret: float = 0.0
    length: int = 0


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, np.float64)
    return {
        "mean": float(a.mean()),
        "std": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def env_config_for(policy: Policy, env_id: str | None, render: bool) -> EnvConfig:
    """The checkpoint's ``spec.env``, with another id if given, rendering frames if asked."""
    config = policy.experiment.spec.env
    if env_id:
        config = dataclasses.replace(config, id=env_id)
    if render:
        if is_football(config.id):
            raise EvalError(
                f"{config.id}: Football renders only through gfootball's own window (SDL and "
                f"OpenGL on a display), which the actors' headless envs do not open; run "
                f"without --video"
            )
        # Off-screen: pygame (classic control) would otherwise look for a display and a
        # sound card, and complain on a headless machine.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        config = dataclasses.replace(config, options={**config.options, "render_mode": "rgb_array"})
    return config


def evaluate(
    policy: Policy,
    env_config: EnvConfig,
    episodes: int,
    deterministic: bool = True,
    seed: int = 0,
    num_envs: int = DEFAULT_ENVS,
    on_frame: Callable[[np.ndarray], None] | None = None,
    video_episodes: int = 1,
    on_episode: Callable[[int, float, int], None] | None = None,
) -> dict:
    """Plays ``episodes`` episodes with the policy; returns the results (see :func:`main`).

    Args:
      policy: the policy.
      env_config: what to make the envs from (``spec.env``); its spaces must be the policy's.
      episodes: how many episodes to play.
      deterministic: act with the mode or greedy action (else sample).
      seed: episode j starts from ``reset(seed=seed + j)``.
      num_envs: envs stepped together (at most ``episodes``).
      on_frame: called with each rgb frame of the first ``video_episodes`` episodes env 0
        plays (env 0 is then made with ``render_mode="rgb_array"`` in ``env_config``).
      video_episodes: how many of env 0's episodes to render.
      on_episode: called with (episodes done, return, length) as each episode ends.

    Raises:
      EvalError: the env cannot be made, renders nothing, or its spaces differ.
    """
    k = max(1, min(num_envs, episodes))
    plain = dataclasses.replace(
        env_config,
        options={k_: v for k_, v in env_config.options.items() if k_ != "render_mode"},
    )
    slots: list[_Slot] = []
    try:
        for i in range(k):
            slots.append(_Slot(make_env(env_config if (i == 0 and on_frame) else plain)))
    except ValueError as exc:
        for s in slots:
            s.env.close()
        raise EvalError(str(exc)) from None
    try:
        _check_spaces(policy, slots[0].env, env_config.id)
        return _play(
            policy, slots, episodes, deterministic, seed, on_frame, video_episodes, on_episode
        )
    finally:
        for s in slots:
            s.env.close()


def _check_spaces(policy: Policy, env, env_id: str) -> None:
    try:
        got = spec_of(env, env_id)
    except ValueError as exc:
        raise EvalError(str(exc)) from None
    want = dataclasses.replace(policy.env_spec, env_id=env_id)
    if got != want:
        raise EvalError(
            f"{env_id} does not fit the policy trained on {policy.env_spec.env_id}: "
            + "; ".join(want.differences(got, "policy", env_id))
        )


def _play(policy, slots, episodes, deterministic, seed, on_frame, video_episodes, on_episode):
    spec = policy.env_spec
    dtype = np.dtype(spec.observation_dtype)
    k = len(slots)
    obs = np.zeros((k, *spec.observation_shape), dtype)
    rewards_in = np.zeros(k, np.float32)
    state = policy.initial_state(k)
    fresh = policy.initial_state(k)
    returns: list[float | None] = [None] * episodes
    lengths: list[int | None] = [None] * episodes
    started = done = 0
    recorded = 0  # episodes of env 0 rendered so far
    start = time.monotonic()

    def begin(i: int) -> None:
        nonlocal started
        slot = slots[i]
        if started >= episodes:
            slot.episode = None
            return
        obs[i], _ = slot.env.reset(seed=seed + started)
        slot.episode, slot.ret, slot.length = started, 0.0, 0
        started += 1
        restart(i)

    def restart(i: int) -> None:
        rewards_in[i] = 0.0
        for s, f in zip(state, fresh):
            s[i] = f[i]

    def frame(i: int) -> None:
        if on_frame and i == 0 and recorded < video_episodes and slots[0].episode is not None:
            image = slots[0].env.render()
            if image is None:
                raise EvalError(
                    f"{slots[0].env.spec.id if slots[0].env.spec else 'env'} "
                    f"rendered no rgb_array frame"
                )
            on_frame(np.asarray(image))

    for i in range(k):
        begin(i)
    frame(0)
    starts = [int(getattr(s.env.action_space, "start", 0)) for s in slots]
    while done < episodes:
        active = [i for i in range(k) if slots[i].episode is not None]
        rows = np.asarray(active)
        actions, new_state = policy.act(
            obs[rows], [s[rows] for s in state], deterministic, rewards_in[rows]
        )
        for s, n in zip(state, new_state):
            s[rows] = n
        for j, i in enumerate(active):
            slot = slots[i]
            if spec.discrete:
                action = int(actions[j]) + starts[i]
            else:
                space = slot.env.action_space
                action = np.clip(actions[j], space.low, space.high)
            o, r, term, trunc, info = slot.env.step(action)
            obs[i] = o
            rewards_in[i] = r
            slot.ret += float(r)
            slot.length += 1
            frame(i)
            if not (term or trunc):
                continue
            if term and info.get(GAME_CONTINUES):
                restart(i)  # a lost life: the learner starts its state over, the game goes on
                continue
            returns[slot.episode], lengths[slot.episode] = slot.ret, slot.length
            done += 1
            if on_episode:
                on_episode(done, slot.ret, slot.length)
            if i == 0:
                recorded += 1
            begin(i)
            frame(i)
    seconds = time.monotonic() - start
    steps = int(sum(lengths))
    return {
        "episodes": episodes,
        "returns": returns,
        "lengths": lengths,
        "return": _stats(returns),
        "length": _stats(lengths),
        "env_steps": steps,
        "seconds": seconds,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "parallel_envs": k,
        "video_episodes": min(recorded, video_episodes) if on_frame else 0,
    }


class VideoWriter:
    """Encodes rgb frames to ``.mp4`` (H.264 by imageio-ffmpeg's bundled ffmpeg) or ``.gif``,
    as they come (no frame is held beyond the encoder's buffer).

    Raises:
      EvalError: an unknown suffix, or the encoder is not installed.
    """

    def __init__(self, path: str, fps: float):
        import imageio.v2 as imageio

        self.path = path
        self.frames = 0
        self.size: tuple[int, int] | None = None
        suffix = os.path.splitext(path)[1].lower()
        if suffix not in VIDEO_SUFFIXES:
            raise EvalError(f"--video {path}: write .mp4 or .gif, not {suffix or 'no suffix'!r}")
        if suffix == ".mp4":
            try:
                import imageio_ffmpeg  # noqa: F401 - its bundled ffmpeg encodes
            except ImportError:
                raise EvalError(
                    "--video .mp4 needs imageio-ffmpeg: pip install 'seedrl[video]' (or write .gif)"
                ) from None
            # Even sizes (H.264 needs them), else the frame's own size: no rescaling.
            self._writer = imageio.get_writer(
                path, fps=fps, codec="libx264", quality=7, macro_block_size=2
            )
        else:
            self._writer = imageio.get_writer(path, mode="I", duration=1000.0 / fps, loop=0)

    def __call__(self, frame: np.ndarray) -> None:
        self.size = (int(frame.shape[1]), int(frame.shape[0]))
        self._writer.append_data(np.ascontiguousarray(frame, np.uint8))
        self.frames += 1

    def close(self) -> None:
        """Finishes the file."""
        self._writer.close()


def video_fps(env_config: EnvConfig) -> float:
    """Frames per second of real time: the env's ``render_fps``; an Atari agent step is
    ``frameSkip`` frames of the console's 60."""
    from seedrl.actors.atari import is_atari

    if is_atari(env_config.id):
        return 60.0 / env_config.atari.frame_skip
    env = make_env(
        dataclasses.replace(
            env_config, options={k: v for k, v in env_config.options.items() if k != "render_mode"}
        )
    )
    try:
        return float(env.metadata.get("render_fps") or 30)
    finally:
        env.close()


class Progress:
    """One line on a terminal, rewritten as episodes end; on a pipe, a line every tenth."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self.returns: list[float] = []
        self._next_line = 0

    def __call__(self, done: int, ret: float, length: int) -> None:
        self.returns.append(ret)
        text = (
            f"episode {done}/{self.total}: return {ret:.1f}, length {length}; "
            f"mean so far {np.mean(self.returns):.1f}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text)
            if done == self.total:
                self.stream.write("\n")
        elif done >= self._next_line or done == self.total:
            self.stream.write(text + "\n")
            self._next_line = done + max(1, self.total // 10)
        self.stream.flush()


def _utc_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def parse_args(argv):
    """The command line of ``python -m seedrl.policy.evaluate`` (``seedrl eval``)."""
    p = argparse.ArgumentParser(prog="seedrl eval", description="Evaluate a trained policy.")
    p.add_argument("location", help="a run directory, checkpoint directory, file:// or gs:// URI")
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    p.add_argument("--env", help="another env id with the same spaces (default: spec.env.id)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="the most likely (greedy) action (default)",
    )
    mode.add_argument(
        "--stochastic", dest="deterministic", action="store_false", help="sample actions"
    )
    p.add_argument("--seed", type=int, default=0, help="episode j resets with seed + j")
    p.add_argument("--envs", type=int, default=DEFAULT_ENVS, help="envs stepped together")
    p.add_argument("--output", default="eval.json", help="the results file (default eval.json)")
    p.add_argument("--video", help="record episodes to this .mp4 or .gif")
    p.add_argument(
        "--video-episodes", type=int, default=1, help="episodes in the video (default 1)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    args = p.parse_args(argv)
    for name in ("episodes", "envs", "video_episodes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def run(args) -> dict:
    """Loads, plays, writes the results file (and the run's own copy); returns the results.

    Raises:
      PolicyError, EvalError: one line for people.
    """
    policy = load(args.location)
    config = env_config_for(policy, args.env, render=bool(args.video))
    writer = VideoWriter(args.video, video_fps(config)) if args.video else None
    meta = policy.source.metadata
    print(
        f"evaluating {policy.source.uri} ({policy.agent}, trained {meta.get('env_steps', 0):,} "
        f"env steps) on {args.episodes} episodes of {config.id}, "
        f"{'deterministic' if args.deterministic else 'stochastic'}",
        file=sys.stderr,
        flush=True,
    )
    try:
        results = evaluate(
            policy,
            config,
            args.episodes,
            args.deterministic,
            args.seed,
            args.envs,
            on_frame=writer,
            video_episodes=args.video_episodes,
            on_episode=None if args.quiet else Progress(args.episodes),
        )
    finally:
        if writer:
            writer.close()
    report = {
        "location": args.location,
        "checkpoint": policy.source.uri,
        "agent": policy.agent,
        "env": config.id,
        "trained_env": policy.env_spec.env_id,
        "learner_steps": meta.get("learner_steps"),
        "env_steps_trained": meta.get("env_steps"),
        "deterministic": args.deterministic,
        "seed": args.seed,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **results,
    }
    if writer:
        report["video"] = {
            "path": os.path.abspath(writer.path),
            "frames": writer.frames,
            "size": list(writer.size) if writer.size else None,
        }
    paths = [args.output]
    if policy.source.run_dir:
        name = f"{_utc_stamp()}-{policy.source.checkpoint}.json"
        paths.append(os.path.join(policy.source.run_dir, "eval", name))
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            finite_json.dump(report, fh, indent=1)
    report["written"] = paths
    return report


def _line(name: str, s: dict) -> str:
    return (
        f"{name}: mean {s['mean']:.2f} ± {s['std']:.2f} (std), min {s['min']:g}, max {s['max']:g}"
    )


def main(argv=None) -> int:
    """Evaluates; prints the summary, or one line saying why not (non-zero exit)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        report = run(args)
    except (PolicyError, EvalError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(
        f"{report['episodes']} episodes of {report['env']} ({report['env_steps']:,} steps in "
        f"{report['seconds']:.1f} s)"
    )
    print(_line("return", report["return"]))
    print(_line("length", report["length"]))
    if "video" in report:
        v = report["video"]
        print(f"video: {v['path']} ({v['frames']} frames of {v['size'][0]}x{v['size'][1]})")
    print("results: " + ", ".join(report["written"]))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
