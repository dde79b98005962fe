"""docs/deploy.md stays true to deploy/: the paths, objects and commands it names exist."""

from __future__ import annotations

import re

import yaml

from reconciler.cli import build_parser
from tests.deploy.conftest import DEPLOY, OVERLAYS, REPO, find, rendered

DOC = (REPO / "docs" / "deploy.md").read_text()


def test_every_deploy_path_named_exists() -> None:
    # Repository paths (not tests/deploy/ files; the docs write kubectl's deployment/NAME in full).
    paths = set(re.findall(r"(?<![\w/])(deploy/[\w./-]*\w)", DOC))
    assert paths, "the install steps name deploy/ paths"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert missing == []


def test_kubectl_apply_k_targets_are_kustomizations() -> None:
    targets = set(re.findall(r"kubectl(?: --context \S+)? (?:apply|delete) -k (deploy/[\w/.-]*\w)", DOC))
    assert {"deploy/nats", "deploy/worker", *(f"deploy/{o}" for o in OVERLAYS)} <= targets
    for target in targets:
        assert (REPO / target / "kustomization.yaml").is_file(), target


def test_named_objects_exist_in_the_overlays() -> None:
    objects = rendered("overlays/cert-manager")
    for kind, name in [
        ("Deployment", "kdispatch-reconciler"),
        ("Deployment", "kdispatch-webhook"),
        ("StatefulSet", "nats"),
        ("Service", "nats"),
        ("Service", "kdispatch-reconciler-metrics"),
        ("Role", "kdispatch-reconciler-kubeconfigs"),
        ("Role", "kdispatch-reconciler-worker-kubeconfigs"),
        ("Namespace", "kdispatch-workers"),
        ("CustomResourceDefinition", "workerclusters.kdispatch.io"),
        ("Certificate", "kdispatch-webhook"),
    ]:
        assert f"{name}" in DOC, f"{kind}/{name} is described"
        assert find(objects, kind, name), f"{kind}/{name} exists"
    assert find(rendered("worker"), "Secret", "kdispatch-worker-token") and "kdispatch-worker-token" in DOC


def test_kdispatch_commands_in_the_docs_parse() -> None:
    parser, _ = build_parser()
    blocks = "\n".join(re.findall(r"```sh\n(.*?)```", DOC, re.S))
    commands = re.findall(r"\bkdispatch ((?:serve|log|explain|replay)\s[^\n#]*)", blocks)
    assert len(commands) >= 8
    for command in commands:
        parser.parse_args(command.split())


def test_config_fields_are_documented() -> None:
    """Every key of the shipped config appears in the field table."""

    def keys(node: object, prefix: str = "") -> set[str]:
        out: set[str] = set()
        if isinstance(node, dict):
            for key, value in node.items():
                if prefix.endswith(("labels.", "priorityClasses.")):
                    continue
                out.add(key)
                out |= keys(value, f"{prefix}{key}.")
        elif isinstance(node, list):
            for item in node:
                out |= keys(item, prefix)
        return out

    config = yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())
    table = DOC[DOC.index("## The config file") : DOC.index("## Security")]
    undocumented = sorted(k for k in keys(config) if not re.search(rf"`[^`\n]*\b{k}\b[^`\n]*`", table))
    assert undocumented == []


def test_adding_a_worker_takes_at_most_two_steps_on_the_manager() -> None:
    """Issue 15: a Secret and a WorkerCluster, no config edit, no RBAC edit, no restart."""
    section = DOC[DOC.index("## Register a worker cluster") : DOC.index("**Remove a worker**")]
    steps = section[section.index("**Then, on the manager") :]
    numbered = re.findall(r"^(\d+)\. ", steps, re.M)
    assert numbered == ["1", "2"]
    assert "kubectl -n kdispatch-workers create secret generic" in steps
    assert "kubectl apply -f deploy/examples/worker-cluster.yaml" in steps
