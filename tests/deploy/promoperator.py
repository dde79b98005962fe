"""Structural schemas for the Prometheus Operator objects deploy/overlays/monitoring uses
(monitoring.coreos.com/v1 ServiceMonitor and PrometheusRule). kubernetes-validate ships only
built-in kinds; these follow the operator's CRDs for the fields we use, with unknown fields
rejected, so a typo fails here instead of being dropped by the API server.
"""

from __future__ import annotations

from typing import Any

import jsonschema

_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_NAME = {
    "type": "string",
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "maxLength": 253,
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": _NAME, "namespace": _NAME, "labels": _STRINGS, "annotations": _STRINGS},
    "additionalProperties": False,
}
_SECRET_KEY = {
    "type": "object",
    "required": ["name", "key"],
    "properties": {"name": _NAME, "key": {"type": "string", "minLength": 1}, "optional": {"type": "boolean"}},
    "additionalProperties": False,
}
_TLS = {
    "type": "object",
    "properties": {
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
        "ca": {
            "type": "object",
            "properties": {"secret": _SECRET_KEY, "configMap": _SECRET_KEY},
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
_ENDPOINT = {
    "type": "object",
    "required": ["port"],
    "properties": {
        "port": {"type": "string", "minLength": 1},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": _DURATION},
        "scrapeTimeout": {"type": "string", "pattern": _DURATION},
        "tlsConfig": _TLS,
    },
    "additionalProperties": False,
}

SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": _STRINGS},
                    "additionalProperties": False,
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": _NAME}, "any": {"type": "boolean"}},
                    "additionalProperties": False,
                },
                "endpoints": {"type": "array", "items": _ENDPOINT, "minItems": 1},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

_RULE = {
    "type": "object",
    "required": ["alert", "expr"],
    "properties": {
        "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "expr": {"type": "string", "minLength": 1},
        "for": {"type": "string", "pattern": _DURATION},
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
    "additionalProperties": False,
}

PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "rules": {"type": "array", "items": _RULE, "minItems": 1},
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}


def validate(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``obj`` is not a well-formed ServiceMonitor/PrometheusRule."""
    schema = SCHEMAS.get(obj.get("kind", ""))
    if schema is None:
        raise jsonschema.ValidationError(f"no schema for Prometheus Operator kind {obj.get('kind')!r}")
    jsonschema.Draft202012Validator(schema).validate(obj)
