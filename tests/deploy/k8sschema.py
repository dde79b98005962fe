"""kubernetes-validate's check, with its schemas loaded once per Kubernetes version.

``kubernetes_validate.validate`` reads the (large) definitions file of the version again for every
object; this does exactly the same validation (the same schema files from the package, strict
variant, the same draft 2020-12 validator and reference registry) but caches the validators, so
checking every manifest against two versions stays fast.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate.utils import all_versions, major_minor, schema_contents


def _schema_dir(version: str) -> tuple[str, str]:
    wanted = major_minor(version.removeprefix("v"))
    known = [
        v
        for v in all_versions()
        if tuple(map(int, major_minor(v).split("."))) <= tuple(map(int, wanted.split(".")))
    ]
    if not known:
        raise kubernetes_validate.utils.VersionNotSupportedError(version=wanted)
    return f"v{known[-1]}-local-strict", major_minor(known[-1])


@functools.cache
def _registry(schema_dir: str) -> referencing.Registry[Any]:
    definitions = schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", schema_dir)
    return referencing.Resource.from_contents(definitions) @ referencing.Registry()


@functools.cache
def _validator(schema_dir: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json", schema_dir
        )
    except FileNotFoundError:
        raise kubernetes_validate.utils.SchemaNotFoundError(
            version=schema_dir, kind=kind, api_version=api_version
        ) from None
    registry = referencing.Resource.from_contents(schema) @ _registry(schema_dir)
    validator: jsonschema.protocols.Validator = jsonschema.validators.Draft202012Validator(
        schema, registry=registry
    )
    return validator


def validate(obj: dict[str, Any], version: str) -> str:
    """Validate strictly against ``version``; returns the schema version used. Raises
    ``kubernetes_validate.ValidationError`` like the package does."""
    schema_dir, used = _schema_dir(version)
    try:
        _validator(schema_dir, obj["kind"], obj["apiVersion"]).validate(obj)
    except jsonschema.ValidationError as err:
        raise kubernetes_validate.ValidationError(err, version=used) from None
    return used
