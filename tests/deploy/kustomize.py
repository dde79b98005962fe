"""A small Kustomize renderer: exactly the features deploy/ uses, and an error for anything else.

The tests must render every overlay without a kustomize binary (none comes from PyPI or Debian),
so this implements the subset of kustomize v5 that deploy/ relies on, following its semantics:

- ``resources``: files (multi-document YAML) and directories holding a kustomization;
- ``configMapGenerator`` / ``secretGenerator`` with ``files`` and ``literals``, the content-hash
  name suffix computed as kustomize's hasher does, and references to a generated name rewritten
  in pod templates (volumes, projected volumes, env, envFrom);
- ``patches``: strategic-merge patches (matched by kind/name/namespace, maps merged, lists of
  named items merged by name) and JSON 6902 patches with a ``target``;
- ``images``: newName / newTag / digest on containers and initContainers.

Any other kustomization field raises ``Unsupported``: a renderer that silently ignored a field
would let the tests pass on something ``kubectl apply -k`` renders differently. Where kubectl is
installed, tests/deploy/test_render.py checks this renderer against ``kubectl kustomize``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "patches",
    "images",
}
# Lists merged item by item in a strategic-merge patch, by this key (a subset of the Kubernetes
# patchMergeKey annotations: the ones a patch in deploy/ could touch).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "webhooks": "name",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


class Unsupported(ValueError):
    """The kustomization uses something this renderer does not implement."""


def find_kustomization(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"no kustomization file in {directory}")


def load_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: str | Path) -> list[Obj]:
    """Render the kustomization in ``directory`` to a list of objects."""
    directory = Path(directory)
    spec: Obj = yaml.safe_load(find_kustomization(directory).read_text()) or {}
    unknown = set(spec) - SUPPORTED_FIELDS
    if unknown:
        raise Unsupported(
            f"{directory}: kustomization fields not supported by this renderer: {sorted(unknown)}"
        )
    objects: list[Obj] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        objects.extend(render(path) if path.is_dir() else load_documents(path))
    renames: dict[tuple[str, str, str], str] = {}
    options = spec.get("generatorOptions", {})
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for generator in spec.get(key, []):
            obj = _generate(directory, kind=kind, generator=generator, options=options)
            renames[(kind, obj["metadata"].get("namespace", ""), generator["name"])] = obj["metadata"]["name"]
            objects.append(obj)
    _check_unique(objects, directory)
    for patch in spec.get("patches", []):
        objects = _apply_patch(directory, objects, patch)
    for image in spec.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    for obj in objects:
        _rename_references(obj, renames)
    return objects


def _check_unique(objects: list[Obj], directory: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = identity(obj)
        if key in seen:
            raise ValueError(f"{directory}: {key} is defined twice")
        seen.add(key)


def identity(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


# ---- generators ------------------------------------------------------------------------------


def _generate(directory: Path, *, kind: str, generator: Obj, options: Obj) -> Obj:
    allowed = {"name", "namespace", "files", "literals", "options", "type", "behavior"}
    unknown = set(generator) - allowed
    if unknown or generator.get("behavior", "create") != "create":
        raise Unsupported(f"{directory}: generator fields {sorted(unknown)} / behavior not supported")
    data: dict[str, str] = {}
    for entry in generator.get("files", []):
        key, _, rel = entry.rpartition("=")
        path = directory / rel
        data[key or path.name] = path.read_text()
    for literal in generator.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    merged = {**options, **generator.get("options", {})}
    meta: Obj = {"name": generator["name"]}
    if "namespace" in generator:
        meta["namespace"] = generator["namespace"]
    if merged.get("labels"):
        meta["labels"] = dict(merged["labels"])
    if merged.get("annotations"):
        meta["annotations"] = dict(merged["annotations"])
    obj: Obj = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    if kind == "Secret":
        obj["type"] = generator.get("type", "Opaque")
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        obj["data"] = data
    if not merged.get("disableNameSuffixHash", False):
        meta["name"] = f"{meta['name']}-{content_hash(obj)}"
    return obj


def _go_json(value: Any) -> str:
    """json.Marshal's output: sorted keys, no spaces, HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def content_hash(obj: Obj) -> str:
    """kustomize's name suffix: sha256 of the hashed fields, first 10 hex digits, 5 letters swapped
    so the suffix never looks like a word or a number (api/hasher in kustomize)."""
    if obj["kind"] == "ConfigMap":
        fields: Obj = {"kind": "ConfigMap", "name": obj["metadata"]["name"], "data": obj.get("data", {})}
    else:
        fields = {
            "kind": "Secret",
            "type": obj["type"],
            "name": obj["metadata"]["name"],
            "data": obj.get("data", {}),
        }
    digest = hashlib.sha256(_go_json(fields).encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _pod_specs(obj: Obj) -> list[Obj]:
    if obj.get("kind") == "Pod":
        return [obj.get("spec", {})]
    if obj.get("kind") in WORKLOAD_KINDS:
        return [obj.get("spec", {}).get("template", {}).get("spec", {})]
    if obj.get("kind") == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return []


def _rename_references(obj: Obj, renames: dict[tuple[str, str, str], str]) -> None:
    namespace = obj.get("metadata", {}).get("namespace", "")

    def renamed(kind: str, name: str) -> str:
        return renames.get((kind, namespace, name), name)

    for spec in _pod_specs(obj):
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = renamed("ConfigMap", volume["configMap"]["name"])
            if "secret" in volume:
                volume["secret"]["secretName"] = renamed("Secret", volume["secret"]["secretName"])
            for source in volume.get("projected", {}).get("sources", []):
                if "configMap" in source:
                    source["configMap"]["name"] = renamed("ConfigMap", source["configMap"]["name"])
                if "secret" in source:
                    source["secret"]["name"] = renamed("Secret", source["secret"]["name"])
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    ref["configMapKeyRef"]["name"] = renamed("ConfigMap", ref["configMapKeyRef"]["name"])
                if "secretKeyRef" in ref:
                    ref["secretKeyRef"]["name"] = renamed("Secret", ref["secretKeyRef"]["name"])
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    source["configMapRef"]["name"] = renamed("ConfigMap", source["configMapRef"]["name"])
                if "secretRef" in source:
                    source["secretRef"]["name"] = renamed("Secret", source["secretRef"]["name"])


# ---- images ----------------------------------------------------------------------------------


def _set_image(obj: Obj, image: Obj) -> None:
    for spec in _pod_specs(obj):
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name, tag, digest = split_image(container["image"])
            if name != image["name"]:
                continue
            name = image.get("newName", name)
            if "digest" in image:
                container["image"] = f"{name}@{image['digest']}"
            elif "newTag" in image:
                container["image"] = f"{name}:{image['newTag']}"
            else:
                container["image"] = name + (f"@{digest}" if digest else f":{tag}" if tag else "")


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """``registry:5000/repo/name:tag@sha256:…`` -> (name, tag, digest)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = name.rpartition(":")
        return name, tag, digest or None
    return name, None, digest or None


# ---- patches ---------------------------------------------------------------------------------


def _apply_patch(directory: Path, objects: list[Obj], patch: Obj) -> list[Obj]:
    if set(patch) - {"path", "patch", "target"}:
        raise Unsupported(f"{directory}: patch fields {sorted(set(patch) - {'path', 'patch', 'target'})}")
    text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
    body = yaml.safe_load(text)
    target = patch.get("target")
    if isinstance(body, list):
        if not target:
            raise ValueError(f"{directory}: a JSON 6902 patch needs a target")
        matched = [obj for obj in objects if _matches(obj, target)]
        if not matched:
            raise ValueError(f"{directory}: patch target {target} matches nothing")
        for obj in matched:
            json6902(obj, body)
        return objects
    patched = False
    for obj in objects:
        meta = obj.get("metadata", {})
        same = (
            obj.get("kind") == body.get("kind")
            and meta.get("name") == body.get("metadata", {}).get("name")
            and body.get("metadata", {}).get("namespace", meta.get("namespace")) == meta.get("namespace")
        )
        if (target and _matches(obj, target)) or (not target and same):
            merged = strategic_merge(obj, body)
            obj.clear()
            obj.update(merged)
            patched = True
    if not patched:
        raise ValueError(
            f"{directory}: strategic-merge patch for {body.get('kind')}/{body.get('metadata')} matches nothing"
        )
    return objects


def _matches(obj: Obj, target: Obj) -> bool:
    if set(target) - {"group", "version", "kind", "name", "namespace"}:
        raise Unsupported(f"patch target selectors {sorted(target)}")
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata", {})
    checks = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": meta.get("name"),
        "namespace": meta.get("namespace", ""),
    }
    return all(checks[key] == value for key, value in target.items())


def strategic_merge(base: Any, patch: Any, *, field: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, field=key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        if all(isinstance(item, dict) and key in item for item in base + patch):
            items: list[Any] = copy.deepcopy(base)
            for item in patch:
                index = next((i for i, old in enumerate(items) if old[key] == item[key]), None)
                if item.get("$patch") == "delete":
                    if index is not None:
                        items.pop(index)
                elif index is None:
                    items.append(copy.deepcopy(item))
                else:
                    items[index] = strategic_merge(items[index], item)
            return items
    return copy.deepcopy(patch)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json6902(obj: Obj, operations: list[Obj]) -> None:
    """Apply RFC 6902 add / remove / replace / test operations in place."""
    for op in operations:
        *parents, last = _pointer(op["path"])
        node: Any = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[index] = copy.deepcopy(op["value"])
            elif kind == "remove":
                node.pop(index)
            elif kind == "test":
                if node[index] != op["value"]:
                    raise ValueError(f"test failed at {op['path']}")
            else:
                raise Unsupported(f"JSON patch op {kind}")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and last not in node:
                    raise ValueError(f"replace of missing {op['path']}")
                node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[last]
            elif kind == "test":
                if node.get(last) != op["value"]:
                    raise ValueError(f"test failed at {op['path']}")
            else:
                raise Unsupported(f"JSON patch op {kind}")
