"""Export a trained policy as a TensorFlow SavedModel for serving.

``python -m seedrl.learner.export LOCATION OUT`` (what ``seedrl export`` runs) writes
``OUT/<version>/``, the layout TensorFlow Serving watches (it serves the highest version), with:

- ``serving_default``: the deterministic policy (the mode, or R2D2's greedy action). Inputs:
  ``observation`` [N, *obs]; ``reward`` [N] where the LSTM core reads the reward that led to
  each observation; and for an LSTM policy its state, ``lstm_h``, ``lstm_c`` [N, units] and
  ``previous_action`` [N, width] where the core reads it (all zeros at an episode's start).
  Outputs: ``action`` (in the env's units: bounds applied), ``value``, ``q_values`` (R2D2), and
  the new state under the input names.
- ``sample``: the same plus a ``seed`` [2] int64 input, acting stochastically.
- ``assets.extra/seedrl.json``: the env spec, the agent and the checkpoint it came from.

The SavedModel needs only TensorFlow to load (``tf.saved_model.load``): its functions are graphs
over its own variables, nothing of seedrl. Its actions are those of
:meth:`seedrl.learner.policy.Policy.act`, both being :meth:`PolicyModule.step`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile

import tensorflow as tf

from seedrl.common import finite_json
from seedrl.common.exit_codes import ExitCode
from seedrl.learner.policy import Policy, PolicyError, PolicyModule, load

#: The file beside the SavedModel that describes it (TF Serving ignores assets.extra).
DESCRIPTION = os.path.join("assets.extra", "seedrl.json")


def _signatures(module: PolicyModule) -> dict[str, tf.types.experimental.ConcreteFunction]:
    obs_spec = module.observation_spec()
    state_specs = module.state_specs()
    reward_specs = [tf.TensorSpec([None], tf.float32, "reward")] if module.reads_rewards else []
    names = [s.name for s in state_specs]

    def outputs(args, deterministic: bool, seed=None):
        observation, rest = args[0], list(args[1:])
        reward = rest.pop(0) if module.reads_rewards else tf.zeros(tf.shape(observation)[:1])
        out, new_state = module.step(observation, rest, reward, deterministic, seed)
        out = dict(out)
        out.update(zip(names, new_state))
        return out

    specs = [obs_spec, *reward_specs, *state_specs]
    greedy = tf.function(lambda *args: outputs(args, True), input_signature=specs)
    sample = tf.function(
        lambda *args: outputs(args[:-1], False, args[-1]),
        input_signature=[*specs, tf.TensorSpec([2], tf.int64, "seed")],
    )
    return {
        "serving_default": greedy.get_concrete_function(),
        "sample": sample.get_concrete_function(),
    }


def export(policy: Policy, out_dir: str, version: int | None = None) -> str:
    """Writes the policy as ``out_dir/<version>/`` (default version: the checkpoint's learner
    step, at least 1); returns that directory.

    Raises:
      PolicyError: the version directory exists already (nothing is overwritten).
      OSError: it cannot be written.
    """
    if version is None:
        version = max(1, int(policy.source.metadata.get("learner_steps") or 0))
    if version < 1:
        raise PolicyError(f"--version must be a positive integer, got {version}")
    target = os.path.join(out_dir, str(version))
    if os.path.exists(target):
        raise PolicyError(f"{target} exists already; pass another --version or OUT")
    os.makedirs(out_dir, exist_ok=True)
    module = policy.module
    root = tf.Module()
    # Only variables are saved: the networks' Keras objects are not, so that loading needs no
    # Python code of ours.
    root.parts = module.parts
    signatures = _signatures(module)
    # Written beside the target and renamed into place: TF Serving polls OUT and must never
    # see a half-written version.
    stage = tempfile.mkdtemp(prefix=f".{version}-", dir=out_dir)
    try:
        tf.saved_model.save(root, stage, signatures=signatures)
        os.makedirs(os.path.join(stage, "assets.extra"), exist_ok=True)
        with open(os.path.join(stage, DESCRIPTION), "w", encoding="utf-8") as fh:
            finite_json.dump(describe(policy, signatures), fh, indent=1, sort_keys=True)
        os.replace(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return target


def describe(policy: Policy, signatures: dict | None = None) -> dict:
    """What a serving client needs to know: the env spec (observation shape and dtype, action
    bounds), the agent, the checkpoint and the signatures' inputs and outputs."""
    signatures = signatures or _signatures(policy.module)
    meta = policy.source.metadata
    return {
        "agent": policy.agent,
        "env_spec": policy.env_spec.to_json(),
        "checkpoint": policy.source.uri,
        "learner_steps": meta.get("learner_steps"),
        "env_steps": meta.get("env_steps"),
        "recurrent": policy.recurrent,
        "signatures": {
            name: {
                "inputs": [s.name for s in tf.nest.flatten(fn.structured_input_signature)],
                "outputs": sorted(fn.structured_outputs),
            }
            for name, fn in signatures.items()
        },
    }


def parse_args(argv):
    """The command line of ``python -m seedrl.learner.export``."""
    p = argparse.ArgumentParser(
        prog="seedrl export", description="Write a trained policy as a TensorFlow SavedModel."
    )
    p.add_argument("location", help="a run directory, checkpoint directory, file:// or gs:// URI")
    p.add_argument("out", help="the model directory: the SavedModel goes to OUT/<version>/")
    p.add_argument(
        "--version",
        type=int,
        help="the version subdirectory (default: the checkpoint's learner step)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Exports; prints where to, or one line saying why not (non-zero exit)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        policy = load(args.location)
        target = export(policy, args.out, args.version)
    except PolicyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    spec = policy.env_spec
    print(
        f"exported {policy.source.uri} ({policy.agent}, {spec.env_id}: {spec.describe()}) to "
        f"{target}; load it with tf.saved_model.load({json.dumps(target)}) or serve "
        f"{os.path.abspath(args.out)} with TensorFlow Serving",
        flush=True,
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
