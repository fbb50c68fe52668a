"""The container images' Dockerfiles and requirement lists (images/).

No Docker engine runs where the tests run, so the images are checked by reading what builds
them: pinned bases, multi-stage builds, a fixed non-root user, no build tools in the final
stage, and requirement lists that cover what the code in each image imports.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from seedrl.common import config

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {
    # Dockerfile: (source packages it copies, requirement lists, entry module)
    "Dockerfile.learner": ({"common", "learner"}, ["learner.txt"], "seedrl.learner"),
    "Dockerfile.actor": ({"common", "actors"}, ["actor.txt", "football.txt"], "seedrl.actors"),
    "Dockerfile.operator": ({"common", "service"}, ["operator.txt"], "seedrl.service.operator"),
}
UID = "1000"  # service/operator/render/common.py's RUN_AS and the operator chart's runAsUser
BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|clang|cmake|make|[\w.+-]+-dev)\b")
_PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}$")


@dataclasses.dataclass
class Stage:
    """One build stage: its base, its name and its instructions."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]]


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """A Dockerfile's global ARG defaults and its stages (continuations joined)."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name, []))
        elif not stages:
            assert keyword == "ARG", f"{path.name}: only ARG may precede the first FROM"
            key, _, default = rest.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


def _requirements(name: str) -> list[str]:
    text = (ROOT / "images" / name).read_text()
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            out[_normalize(name)] = version.strip()
    return out


def _final_chain(stages: list[Stage]) -> list[Stage]:
    """The final stage and every stage it is built FROM, down to the base image (for a base
    such as runtime-football-${FOOTBALL}, every variant); not the stages it only copies from."""
    by_name = {s.name: s for s in stages if s.name}
    chain, todo = [], [stages[-1]]
    while todo:
        stage = todo.pop()
        chain.append(stage)
        if stage.base != "${PYTHON_IMAGE}":
            pattern = re.sub(r"\\\$\\\{\w+\\\}", ".+", re.escape(stage.base))
            parents = [s for n, s in by_name.items() if re.fullmatch(pattern, n)]
            assert parents, stage.base
            todo += parents
    return chain


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_base_images_are_pinned_by_tag_and_digest(dockerfile):
    args, stages = parse(ROOT / dockerfile)
    assert _PINNED_BASE.match(args["PYTHON_IMAGE"]), args["PYTHON_IMAGE"]
    names = {s.name for s in stages}
    for stage in stages:
        # Every stage starts from the pinned base or from an earlier stage of this file.
        # (or, for a named context's default, scratch: an empty folder).
        base = stage.base
        assert (
            base == "${PYTHON_IMAGE}"
            or base in names
            or (base == "scratch" and not stage.instructions)
        ), base
    # All images share one base, so a refresh moves them together.
    bases = {parse(ROOT / d)[0]["PYTHON_IMAGE"] for d in IMAGES}
    assert len(bases) == 1


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_final_stage_runs_as_a_fixed_non_root_user(dockerfile):
    _, stages = parse(ROOT / dockerfile)
    final = stages[-1]
    users = [rest for keyword, rest in final.instructions if keyword == "USER"]
    assert users and users[-1] == f"{UID}:{UID}", users  # numeric, so runAsNonRoot can verify
    runs = " ".join(rest for keyword, rest in final.instructions if keyword == "RUN")
    assert f"useradd --uid {UID} --gid {UID}" in runs and f"groupadd --gid {UID}" in runs
    entry = [rest for keyword, rest in final.instructions if keyword == "ENTRYPOINT"]
    assert entry == [f'["python", "-m", "{IMAGES[dockerfile][2]}"]']


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_multi_stage_with_no_build_tools_in_the_final_image(dockerfile):
    _, stages = parse(ROOT / dockerfile)
    assert len(stages) >= 2
    final = stages[-1]
    copies = [rest for keyword, rest in final.instructions if keyword == "COPY"]
    from_builder = [c for c in copies if c.startswith("--from=")]
    assert len(from_builder) == 1 and from_builder[0].endswith("/opt/venv /opt/venv")
    sources = {c.split()[0].rstrip("/") for c in copies if not c.startswith("--from=")}
    assert sources == IMAGES[dockerfile][0]
    chain = _final_chain(stages)
    if dockerfile == "Dockerfile.actor":  # Football's libraries only when asked for
        runs = [rest for keyword, rest in final.instructions if keyword == "RUN"]
        assert any(
            re.search(r'if \[ "\$\{FOOTBALL\}" = 1 \]; then\s+apt-get update;', r) for r in runs
        )
    for stage in chain:
        for keyword, rest in stage.instructions:
            if keyword == "RUN":
                assert "pip install" not in rest, (stage.name, rest)
                if "apt-get install" in rest:
                    assert not BUILD_TOOLS.search(rest.split("apt-get install", 1)[1]), rest
                    assert "rm -rf /var/lib/apt/lists/*" in rest


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_buildah_can_build_it(dockerfile):
    # buildah 1.28 (Debian 12's, what make test-images builds with) skips a stage referenced
    # through an argument (FROM stage-${ARG}) as unused and then cannot find it; the BuildKit
    # features both support (RUN --mount, a named context overriding a stage) are fine.
    _, stages = parse(ROOT / dockerfile)
    for stage in stages:
        assert "$" not in stage.base or stage.base == "${PYTHON_IMAGE}", stage.base
        for keyword, rest in stage.instructions:
            if keyword == "COPY" and rest.startswith("--from="):
                assert "$" not in rest.split()[0], rest
            if keyword == "RUN":
                for source in re.findall(r"from=([^,\s]+)", rest):
                    assert "$" not in source, rest


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_requirement_lists_exist_and_are_pinned(dockerfile):
    pins = _constraints()
    text = (ROOT / dockerfile).read_text()
    for name in IMAGES[dockerfile][1]:
        assert f"images/{name}" in text
        for requirement in _requirements(name):
            assert _normalize(requirement) in pins, f"{name}: {requirement} not in constraints"


def test_tpu_requirements_pin_every_package_they_add():
    requirements = dict(r.split("==") for r in _requirements("learner-tpu.txt"))
    assert requirements["tensorflow-tpu"] == "2.20.0"
    assert "libtpu" in requirements
    text = (ROOT / "Dockerfile.learner").read_text()
    assert 'tpu) tf="-r learner-tpu.txt' in text and 'cpu) tf="tensorflow-cpu"' in text
    assert _constraints()["tensorflow-cpu"] == "2.21.0"


def test_gpu_requirements_pin_tensorflow_with_cuda_at_the_cpu_version_and_every_cuda_wheel():
    requirements = dict(r.split("==") for r in _requirements("learner-gpu.txt"))
    # The same TensorFlow as the CPU image, so a checkpoint moves between them.
    assert requirements.pop("tensorflow[and-cuda]") == _constraints()["tensorflow-cpu"]
    assert requirements and all(
        name.startswith("nvidia-") and name.endswith("-cu12") for name in requirements
    ), requirements
    assert 'gpu) tf="-r learner-gpu.txt"' in (ROOT / "Dockerfile.learner").read_text()


def test_dockerignore_sends_only_what_the_dockerfiles_copy():
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set().union(*(sources for sources, _, _ in IMAGES.values()))
    assert allowed == copied | {"constraints.txt", "images/*.txt"}


# --- what each image's code imports ---------------------------------------------------------


def _module_file(dotted: str) -> Path | None:
    """The source file of one of our modules, named as installed (``seedrl.common.config``)."""
    parts = dotted.split(".")
    if parts[0] != "seedrl" or len(parts) < 2:
        return None
    base = ROOT.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def third_party_imports(entry_packages: set[str], entry_module: str) -> set[str]:
    """Dotted names of third-party modules imported (anywhere, lazily too) by the image's code:
    every file of its own package (the operator: its entry module), then whatever of ours
    those import, transitively (common/ only as far as it is used)."""
    files: list[Path] = []
    for pkg in entry_packages - {"common"}:
        if pkg == "service":
            files += [
                _module_file(entry_module),
                _module_file(entry_module + ".__main__"),
                _module_file(entry_module + ".handlers"),
            ]
            files = [f for f in files if f is not None]
        else:
            files += sorted((ROOT / pkg).rglob("*.py"))
    seen: set[Path] = set()
    found: set[str] = set()
    while files:
        path = files.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if top == "seedrl":
                    target = _module_file(name)
                    if target is not None:
                        files.append(target)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    found.add(name)
    return found


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution(dotted: str) -> str:
    """The installed distribution that provides a dotted module name."""
    top = dotted.split(".")[0]
    candidates = _packages_distributions().get(top, [])
    if len(candidates) > 1:  # a namespace package such as google.*
        prefix = "/".join(dotted.split(".")[:2]) + "/"
        candidates = [
            c
            for c in candidates
            if any(
                str(f).startswith(prefix) for f in importlib.metadata.distribution(c).files or []
            )
        ]
    assert len(set(candidates)) == 1, (dotted, candidates)
    return _normalize(candidates[0])


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_requirement_lists_cover_every_import(dockerfile):
    packages, lists, entry = IMAGES[dockerfile]
    if not _module_file(entry):
        pytest.fail(f"{dockerfile}'s entry module {entry} does not exist")
    provided = {_normalize(r) for name in lists for r in _requirements(name)}
    if dockerfile == "Dockerfile.learner":
        provided.add("tensorflow-cpu")  # installed by the ACCELERATOR step
    if dockerfile == "Dockerfile.actor":
        provided.add("gfootball")  # from the cached wheel, FOOTBALL=1
    needed = {}
    for module in third_party_imports(packages, entry):
        try:
            needed[module] = _distribution(module)
        except AssertionError:
            # A from-import of a name, not a module (from numpy import float32): its module
            # was counted already.
            if "." not in module:
                raise
    missing = {m: d for m, d in needed.items() if d not in provided}
    assert not missing, f"{dockerfile} lacks the distributions of {missing}"


def test_actor_path_never_imports_tensorflow():
    # Blocks tensorflow outright, then makes and steps the envs the way an actor does.
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "from seedrl.actors.main import make_env_batches\n"
        "from seedrl.common.config import parse_experiment\n"
        "exp = parse_experiment({'metadata': {'name': 'x'}, 'spec': {'env': {'id': "
        "'CartPole-v1'}, 'actors': {'envsPerActor': 4, 'streamsPerActor': 2}}})\n"
        "batches = make_env_batches(exp, 0)\n"
        "for b in batches:\n"
        "    b.close()\n"
        "assert sys.modules['tensorflow'] is None\n"
        "print('ok', len(batches))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok 2", proc.stderr


def _make_images_tags(*variables: str) -> list[str]:
    """The tags ``make images`` gives, read from its dry run."""
    proc = subprocess.run(
        ["make", "-n", "images", "IMAGE_BUILDER=buildah", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return re.findall(r"-t (\S+)", proc.stdout)


def test_make_images_tags_what_the_experiment_and_chart_default_to():
    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    registry = re.search(r"^IMAGE_REGISTRY \?= (\S+)", makefile, re.M)[1]
    assert (config.IMAGE_REGISTRY, config.RELEASE) == (registry, version)
    # The learner image an Experiment runs by default is the one make builds for its kind.
    for kind in config.ACCELERATORS:
        learner, actors, operator = _make_images_tags(f"LEARNER_ACCELERATOR={kind}")
        exp = config.parse_experiment(
            {"metadata": {"name": "x"}, "spec": {"learner": {"accelerator": {"kind": kind}}}}
        )
        assert config.learner_image(exp.spec.learner) == learner
        assert config.actor_image(exp.spec.actors) == actors
    chart = (ROOT / "helm" / "seedrl-operator" / "values.yaml").read_text()
    assert f"repository: {registry}/operator" in chart
    assert operator == f"{registry}/operator:{version}"
    for dockerfile in IMAGES:
        assert f"-f {dockerfile}" in makefile
