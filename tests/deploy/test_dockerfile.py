"""deploy/Dockerfile: the one image. No container engine runs here, so its build stage is replayed
(same COPY list, the context filtered by its .dockerignore, the same ``pip wheel`` of the
package) and the result checked: both components and their entry points are in the wheel."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import DEPLOY, REPO, rendered

DOCKERFILE = DEPLOY / "Dockerfile"
IGNORE = DEPLOY / "Dockerfile.dockerignore"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_base_image_is_python_311_slim_in_every_stage() -> None:
    args = dict(a.split("=", 1) for i, a in instructions() if i == "ARG" and "=" in a)
    for stage in stages():
        image = stage[0][1].split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", image), image


def test_runtime_stage_is_non_root_and_has_no_build_tools() -> None:
    runtime = stages()[-1]
    users = [a for i, a in runtime if i == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0, "numeric, non-root"
    for overlay in ("overlays/cert-manager",):
        for obj in rendered(overlay):
            if obj["kind"] == "Deployment":
                pod = obj["spec"]["template"]["spec"]["securityContext"]
                assert (pod["runAsUser"], pod["runAsGroup"]) == (int(uid), int(gid)), obj["metadata"]["name"]
    runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "pip install --no-index" in runs, "installs only the wheels built in the build stage"
    assert "pip uninstall --yes setuptools wheel pip" in runs
    for tool in ("apt-get install", "gcc", "build-essential", "make "):
        assert tool not in runs
    assert not any(i == "COPY" for i, _ in runtime), "sources stay in the build stage"


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes (with its sub-paths)."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        match = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if pattern.startswith("**/"):
            match = match or any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        if match:
            ignored = not negate
    return ignored


def build_context(dest: Path) -> Path:
    patterns = [
        line.strip() for line in IGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    untracked = [
        str(p.relative_to(REPO))
        for top in ("eventlog", "webhook", "reconciler")
        for p in (REPO / top).rglob("*")
        if p.is_file()
    ]
    for rel in sorted(set(tracked) | set(untracked)):
        if not _ignored(rel, patterns) and (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def test_context_is_small_and_holds_what_the_build_copies(tmp_path: Path) -> None:
    context = build_context(tmp_path / "context")
    tops = {p.name for p in context.iterdir()}
    assert tops == {"pyproject.toml", "README.md", "eventlog", "webhook", "reconciler"}
    assert not list(context.rglob("__pycache__"))


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage, replayed: COPY into /src, then ``pip wheel --no-deps .`` (offline here)."""
    root = tmp_path_factory.mktemp("image")
    context = build_context(root / "context")
    src = root / "src"
    src.mkdir()
    for instruction, args in stages()[0]:
        if instruction != "COPY":
            continue
        *sources, target = args.split()
        for source in sources:
            origin = context / source
            if origin.is_dir():
                shutil.copytree(origin, src / target)
            elif target.endswith("/"):
                shutil.copy2(origin, src / target / origin.name)
            else:
                shutil.copy2(origin, src / target)
    wheels = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=240,
        capture_output=True,
    )
    (wheel,) = wheels.glob("kdispatch-*.whl")
    return wheel


def test_wheel_holds_every_component_and_the_kdispatch_command(built_wheel: Path) -> None:
    with zipfile.ZipFile(built_wheel) as whl:
        names = set(whl.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = whl.read(entry_points).decode()
    assert "kdispatch = reconciler.cli:main" in scripts
    for package in ("eventlog", "webhook", "reconciler"):
        sources = {str(p.relative_to(REPO)) for p in (REPO / package).rglob("*.py")}
        assert sources <= names, f"{package}: missing {sorted(sources - names)[:5]}"
        assert f"{package}/py.typed" in names
    # The container commands of the Deployments resolve inside the image.
    assert "reconciler/commands/serve.py" in names
    assert "webhook/__main__.py" in names, "python -m webhook needs webhook/__main__.py"
