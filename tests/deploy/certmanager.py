"""Structural schemas for the cert-manager objects deploy/ uses (cert-manager.io/v1 Issuer and
Certificate). kubernetes-validate ships only built-in kinds; these follow cert-manager's CRDs for
the fields we use, with unknown fields rejected, so a typo fails here instead of at apply time.
"""

from __future__ import annotations

from typing import Any

import jsonschema

_GO_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
_NAME = {
    "type": "string",
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "maxLength": 253,
}
_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
]  # fmt: skip

_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": _NAME,
        "namespace": _NAME,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}

_ISSUER_REF = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": _NAME,
        "kind": {"enum": ["Issuer", "ClusterIssuer"]},
        "group": {"const": "cert-manager.io"},
    },
    "additionalProperties": False,
}

ISSUER = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Issuer"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,  # exactly one issuer type
            "properties": {
                "selfSigned": {"type": "object", "additionalProperties": False},
                "ca": {
                    "type": "object",
                    "required": ["secretName"],
                    "properties": {"secretName": _NAME},
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

CERTIFICATE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Certificate"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["secretName", "issuerRef"],
            "properties": {
                "secretName": _NAME,
                "issuerRef": _ISSUER_REF,
                "isCA": {"type": "boolean"},
                "commonName": {"type": "string", "maxLength": 64},
                "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "duration": {"type": "string", "pattern": _GO_DURATION},
                "renewBefore": {"type": "string", "pattern": _GO_DURATION},
                "usages": {"type": "array", "items": {"enum": _USAGES}},
                "privateKey": {
                    "type": "object",
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    },
                    "additionalProperties": False,
                    # ECDSA sizes are curve sizes; RSA sizes are key lengths.
                    "if": {"properties": {"algorithm": {"const": "ECDSA"}}, "required": ["algorithm"]},
                    "then": {"properties": {"size": {"enum": [256, 384, 521]}}},
                    "else": {"properties": {"size": {"enum": [2048, 3072, 4096, 8192]}}},
                },
            },
            "anyOf": [{"required": ["dnsNames"]}, {"required": ["commonName"]}],
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

SCHEMAS = {"Issuer": ISSUER, "Certificate": CERTIFICATE}


def validate(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``obj`` is not a well-formed Issuer/Certificate."""
    schema = SCHEMAS.get(obj.get("kind", ""))
    if schema is None:
        raise jsonschema.ValidationError(f"no schema for cert-manager kind {obj.get('kind')!r}")
    jsonschema.Draft202012Validator(schema).validate(obj)
