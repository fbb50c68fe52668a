"""`seedrl validate` as a user runs it: YAML bombs refused in one line, the env id checked by
making one env (issue 19, findings 6 and 7)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seedrl.common import precision
from seedrl.common.config import parse_experiment
from seedrl.common.hardware import parse_cpuinfo
from seedrl.common.precision import Device
from seedrl.service.cli.main import precision_lines
from support.cpus import ZEN3

ROOT = Path(__file__).resolve().parents[3]
SUPPORT = ROOT / "tests" / "support"
#: Nine levels of ten aliases each: 10**9 values once expanded, in a few hundred bytes.
LAUGHS = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10) if i else 'lol'}]\n" for i in range(10)
)


def validate(path, *args, env=None):
    """Runs `seedrl validate`; the timeout only guards against a hang (a bomb used to run
    for minutes)."""
    return subprocess.run(
        [sys.executable, "-m", "seedrl.service.cli", "validate", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "name, text, reason",
    [
        (
            "recursive",
            "metadata: {name: x}\nspec:\n  env:\n    options: &r {r: *r}\n",
            "line 4: a recursive alias",
        ),
        (
            "laughs-in-options",
            LAUGHS + "metadata: {name: x}\nspec: {env: {options: {o: *l9}}}\n",
            "aliases expand the document from",
        ),
        ("laughs-in-name", LAUGHS + "metadata: {name: *l9}\n", "aliases expand the document"),
        (
            "deep",
            "metadata: {name: x}\nspec: " + "[" * 20000 + "]" * 20000 + "\n",
            "nested too deeply",
        ),
    ],
)
def test_yaml_bombs_get_a_one_line_error(tmp_path, name, text, reason):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    result = validate(path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"error: invalid experiment {path}:"
    assert len(lines) == 2 and reason in lines[1], result.stderr


def test_a_huge_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    result = validate(path)
    assert result.returncode == 2
    assert "over 1048576 bytes; refused unread" in result.stderr


def test_validate_makes_one_env_to_check_its_id(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("metadata: {name: x}\nspec: {env: {id: NoSuchEnv-v99}}\n")
    result = validate(path)
    assert result.returncode == 2
    assert "spec.env.id: cannot make 'NoSuchEnv-v99'" in result.stderr
    assert "spec:" in result.stdout  # the resolved document is still printed
    assert validate(path, "--no-env-check").returncode == 0

    # A user's env, registered by the module spec.env.imports names.
    path.write_text(
        "metadata: {name: x}\nspec: {env: {id: SeedrlTest/Corridor-v0, "
        "imports: [seedrl_test_envs]}}\n"
    )
    missing = validate(path)
    assert missing.returncode == 2
    assert "spec.env.imports: cannot import 'seedrl_test_envs'" in missing.stderr
    found = validate(path, env={"PYTHONPATH": str(SUPPORT)})
    assert found.returncode == 0, found.stderr
    assert (
        "spec.env.id: SeedrlTest/Corridor-v0 is registered: float32[8] observations, "
        "2 discrete actions"
    ) in found.stderr


def policy_command(*args, env=None, cwd=ROOT):
    """Runs `seedrl eval` or `seedrl export` as a user does."""
    from support.trained_runs import child_env

    return subprocess.run(
        [sys.executable, "-m", "seedrl.service.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**child_env(), **(env or {})},
    )


def test_eval_and_export_take_a_gs_checkpoint_uri(trained_runs, gcs_bucket, gcs_emulator, tmp_path):
    from support.trained_runs import copy_store_to_gcs

    uri = copy_store_to_gcs(str(trained_runs["vtrace"] / "checkpoints"), gcs_bucket)
    emulator = {"STORAGE_EMULATOR_HOST": gcs_emulator.url}
    proc = policy_command("eval", uri, "--episodes", "3", "--quiet", env=emulator, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "eval.json").read_text())  # the default output, in cwd
    assert report["checkpoint"].startswith(uri + "/ckpt-") and len(report["returns"]) == 3
    assert "return: mean" in proc.stdout
    proc = policy_command("export", report["checkpoint"], str(tmp_path / "m"), env=emulator)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list((tmp_path / "m").glob("*/saved_model.pb"))) == 1


def test_eval_and_export_refuse_what_they_cannot_load_in_one_line(tmp_path):
    for args in (
        ["eval", str(tmp_path / "missing")],
        ["export", str(tmp_path / "missing"), str(tmp_path / "m")],
        ["eval"],
        ["export", str(tmp_path)],
    ):
        proc = policy_command(*args)
        assert proc.returncode == 1, args
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
    # An empty directory is found only by loading it (TensorFlow's start-up noise comes first).
    proc = policy_command("eval", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: cannot load a policy from {tmp_path}: {tmp_path} holds no checkpoints "
        f"(no MANIFEST.json listing any)"
    )


def test_values_past_int64_or_absurd_networks_are_refused_naming_each_field():
    # Issue 27, item 8: each of these was accepted and then overflowed the CRD's int64 or
    # the learner's memory.
    result = validate(
        ROOT / "examples" / "cartpole-vtrace.yaml",
        "--set",
        "spec.budget.maxEnvSteps=1e30",
        "--set",
        f"spec.seed={2**64}",
        "--set",
        "spec.agent.network.hiddenSizes=[100000000]",
        "--no-env-check",
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    problems = result.stderr.strip().splitlines()[1:]
    assert [line.split(":")[0].strip() for line in problems] == [
        "spec.seed",
        "spec.agent.network.hiddenSizes[0]",
        "spec.budget.maxEnvSteps",
    ], result.stderr
    assert "within int64" in problems[0] and "<= 8192" in problems[1]


def test_validate_says_what_precision_auto_picks_here(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("metadata: {name: x}\nspec: {agent: {network: {name: nature_cnn}}}\n")
    result = validate(path, "--no-env-check")
    assert result.returncode == 0, result.stderr
    here = precision.resolve("auto", precision.this_machine(), "nature_cnn")
    assert f"spec.agent.network.precision on this machine: {here.summary()}" in result.stderr


def test_precision_lines_for_this_machine_and_the_cluster_learner():
    without = Device("cpu", cpu=parse_cpuinfo(ZEN3))
    exp = parse_experiment(
        {
            "metadata": {"name": "x"},
            "spec": {
                "agent": {"network": {"name": "nature_cnn"}},
                "learner": {"accelerator": {"kind": "gpu", "gpu": {"type": "nvidia-l4"}}},
            },
        }
    )
    lines = precision_lines(exp, without)
    assert lines[0].startswith("spec.agent.network.precision on this machine: precision: auto")
    assert "picks float32" in lines[0] and "neither avx512_bf16 nor amx_bf16" in lines[0]
    assert lines[1].startswith("spec.agent.network.precision on the cluster learner's GPU")
    assert "picks bfloat16" in lines[1] and "compute capability 8.9" in lines[1]
    assert len(lines) == 2

    explicit = dataclasses.replace(exp.spec.agent.network, precision="bfloat16")
    exp = dataclasses.replace(
        exp,
        spec=dataclasses.replace(
            exp.spec, agent=dataclasses.replace(exp.spec.agent, network=explicit)
        ),
    )
    lines = precision_lines(exp, without)
    assert lines[1].startswith("warning: precision bfloat16 is not native on this device")
    assert "26 env steps/s in bfloat16 against 281 in float32" in lines[1]
