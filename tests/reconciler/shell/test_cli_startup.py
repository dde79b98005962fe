"""`kdispatch <verb> --help` and an argument error load none of the service's libraries: a verb
imports what it needs when it runs (bench/cli_startup.py measures the time; this checks the
cause, without timing anything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("aiohttp", "numpy", "nats", "structlog", "kubernetes_asyncio", "matplotlib")

_PROBE = f"""
import contextlib, io, json, sys
from reconciler.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
print(json.dumps({{"code": code, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})}}))
"""


def loaded_by(*argv: str) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60, env=env, check=True
    )
    result = json.loads(proc.stdout)
    return result["code"], result["loaded"]


@pytest.mark.parametrize("verb", COMMANDS)
def test_help_of_every_verb_loads_no_service_library(verb: str) -> None:
    code, loaded = loaded_by(verb, "--help")
    assert code == 0
    assert loaded == [], f"`kdispatch {verb} --help` imported {loaded}"


def test_an_argument_error_loads_no_service_library_either() -> None:
    code, loaded = loaded_by("log", "-n", "-5")
    assert code == 2 and loaded == []


def test_the_probe_sees_a_library_a_verb_does_load() -> None:
    # The check above can fail: a run that opens the log does load NATS.
    code, loaded = loaded_by("log", "--file", str(ROOT / "tests" / "fixtures" / "missing.jsonl"))
    assert code == 2 and "structlog" in loaded
