"""The README's commands work from a fresh clone with nothing beside it.

A user has only the clone: no ``../shared``, no absolute path of ours. The test clones the
repository into an empty directory, checks that every repository path the README and the docs
name exists in the clone and that none points outside it, then runs the README's "look around"
block verbatim in the clone (after a short ``demo --fast`` to make its log), with the clone's own
code. The one shortening: ``simulate`` gets ``--limit`` so the test stays short.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

OUTSIDE = re.compile(r"(\.\./shared|/work/|\.\./corpus)")
REPO_PATH = re.compile(r"(?<![\w./-])((?:data|deploy|bench|docs|tests/fixtures)/[\w./-]*[\w/])")


def _clone(tmp_path: Path) -> Path:
    alone = tmp_path / "alone"
    alone.mkdir()
    clone = alone / "kdispatch"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=120)
    assert [p.name for p in alone.iterdir()] == ["kdispatch"]  # nothing sits beside it
    return clone


def _docs(clone: Path) -> list[Path]:
    return [clone / "README.md", *sorted((clone / "docs").glob("*.md"))]


def test_docs_name_only_paths_inside_the_clone(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    missing, outside = [], []
    for doc in _docs(clone):
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if OUTSIDE.search(line):
                outside.append(f"{doc.name}:{n}: {line.strip()}")
            for path in REPO_PATH.findall(line):
                if any(ch in path for ch in "*<>") or path.endswith((".", "/.")) or "NAME" in path:  # placeholders
                    continue
                if not (clone / path.rstrip("/.")).exists():
                    missing.append(f"{doc.name}:{n}: {path}")
    assert not outside, "docs point outside the repository:\n" + "\n".join(outside)
    assert not missing, "docs name paths the clone does not have:\n" + "\n".join(missing)


def _look_around_block(readme: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    (block,) = [b for b in blocks if ".venv/bin/kdispatch status" in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_commands_run_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # `.venv/bin/kdispatch` as the README says, but running the clone's code with this interpreter.
    venv_bin = clone / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    launcher = venv_bin / "kdispatch"
    launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m reconciler.cli \"$@\"\n")
    launcher.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(clone), "TERM": "dumb"}
    demo = subprocess.run(
        [str(launcher), "demo", "--fast", "--quiet", "--jobs", "20", "--data-dir", ".kdispatch"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=240,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    for command in _look_around_block((clone / "README.md").read_text()):
        if " simulate " in command:
            command += " --limit 300 --quiet"
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if ">" in command:  # its output went to the file it names
            target = clone / command.rsplit(">", 1)[1].strip()
            assert target.stat().st_size > 0, f"{command} wrote nothing"
        else:
            assert proc.stdout.strip(), f"{command} printed nothing"
