"""The manifests that follow the code are exactly what deploy/generate.py makes of it, so when
API_CALLS, SUPPORTED_KINDS or the workers' Secrets change, one command brings deploy/ along."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

from tests.deploy.conftest import DEPLOY


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_generate", DEPLOY / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_the_generators_output() -> None:
    stale = [
        str(path.relative_to(DEPLOY))
        for path, text in _generator().generated().items()
        if path.read_text() != text
    ]
    assert stale == [], f"run: .venv/bin/python deploy/generate.py  (stale: {stale})"


def test_check_mode_through_the_script() -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "generate.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_role_names_the_configs_secrets() -> None:
    assert _generator().kubeconfig_secrets(DEPLOY / "base" / "config.yaml") == ["worker-a-kubeconfig"]
