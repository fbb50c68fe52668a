"""`seedrl validate` as a user runs it: YAML bombs refused in one line, the env id checked by
making one env (issue 19, findings 6 and 7)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
