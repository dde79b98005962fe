"""Shared fixtures for the deploy/ checks: where the manifests are and what each overlay renders."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.deploy import kustomize

if TYPE_CHECKING:
    from tests.deploy.natscluster import NatsCluster

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = sorted(
    path.parent.relative_to(DEPLOY).as_posix() for path in DEPLOY.rglob("kustomization.yaml")
)
# Installed on a manager cluster by `kubectl apply -k`: the base plus NATS plus TLS.
OVERLAYS = ("overlays/cert-manager", "overlays/self-signed")

_cache: dict[str, list[dict[str, Any]]] = {}


def rendered(directory: str) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/<directory>`` would apply (cached per session)."""
    if directory not in _cache:
        _cache[directory] = kustomize.render(DEPLOY / directory)
    return _cache[directory]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


@functools.cache
def manifest_files() -> tuple[Path, ...]:
    """Every YAML file under deploy/ that holds Kubernetes objects (not kustomizations, not our config)."""
    files = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs):
            files.append(path)
    return tuple(files)


@pytest.fixture(scope="session")
def shipped_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """deploy/nats as it would run, on loopback: three nats-servers from the shipped nats.conf,
    with TLS and the components' users; stopped at the end of the session."""
    from tests.deploy.natscluster import shipped_nats_cluster

    with shipped_nats_cluster(tmp_path_factory.mktemp("shipped-nats")) as cluster:
        yield cluster


@pytest.fixture(params=KUSTOMIZATIONS)
def kustomization(request: pytest.FixtureRequest) -> str:
    return str(request.param)
