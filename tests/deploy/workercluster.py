"""WorkerCluster objects (kdispatch's own CRD, not in kubernetes-validate) checked against the
CRD shipped in deploy/base, strictly (an unknown field is an error, as the API server's pruning
would drop it without a word), and then as the reconciler reads them."""

from __future__ import annotations

import copy
import functools
from typing import Any

import jsonschema
import yaml

from reconciler.service.clusters.objects import declared
from tests.deploy.conftest import DEPLOY

CRD = DEPLOY / "base" / "workercluster-crd.yaml"


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = _strict(out["items"])
    return out


@functools.cache
def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"].update(apiVersion={"const": "kdispatch.io/v1alpha1"}, kind={"const": "WorkerCluster"}, metadata={"type": "object"})
    return schema


def validate(obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, _schema())
    declared(obj)
