"""The demo plays the kube-apiserver's part of admission: real AdmissionReviews over HTTPS.

For each CREATE, as the apiserver does: call the mutating hook (``/mutate``), apply the
JSONPatch it answers, fill ``metadata.uid`` (and ``name`` from ``generateName``), then call the
validating hook (``/validate``) with the final object; the webhook records ``JobSubmitted`` there.
TLS is verified against the webhook's CA, like a ``caBundle`` in a webhook configuration.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import uuid
from dataclasses import dataclass
from typing import Any

import aiohttp

from eventlog.kube.kinds import lookup_api_version


class AdmissionFailed(RuntimeError):
    """The webhook denied or could not answer a review; the message says which job and why."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add``/``replace``/``remove`` on a copy (what an apiserver applies for a webhook)."""
    out = copy.deepcopy(obj)
    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        parent: Any = out
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, op["value"])
            elif kind == "replace":
                parent[index] = op["value"]
            elif kind == "remove":
                del parent[index]
            else:
                raise AdmissionFailed(f"unsupported JSONPatch op {kind!r}")
        elif kind in ("add", "replace"):
            parent[last] = op["value"]
        elif kind == "remove":
            del parent[last]
        else:
            raise AdmissionFailed(f"unsupported JSONPatch op {kind!r}")
    return out


def review(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    info = lookup_api_version(obj["apiVersion"], obj["kind"])
    if info is None:
        raise AdmissionFailed(f"{obj['apiVersion']} {obj['kind']} is not a kind kdispatch dispatches")
    meta = obj.get("metadata", {})
    # As the apiserver fills AdmissionRequest.kind and .resource.
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    gvr = {"group": info.group, "version": info.version, "resource": info.plural}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", "default"),
            "operation": operation,
            "userInfo": {"username": "demo-user", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kdispatch-demo"},
        },
    }


@dataclass
class Admitted:
    obj: dict[str, Any]
    warnings: list[str]


class ApiServer:
    """One HTTPS session to the webhook; ``create`` runs mutate + validate for one object."""

    def __init__(self, base_url: str, *, ca_file: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.ca_file = ca_file
        self._ssl_context: ssl.SSLContext | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def _ssl(self) -> ssl.SSLContext:
        # Loaded on first use: the webhook writes its CA when it starts, after we are made.
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context(cafile=self.ca_file)
        return self._ssl_context

    async def __aenter__(self) -> ApiServer:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(self, hook: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.post(f"{self.base_url}/{hook}", json=body, ssl=self._ssl) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise AdmissionFailed(f"/{hook} answered HTTP {resp.status}: {text[:300]}")
        answer: dict[str, Any] = json.loads(text)["response"]
        if answer.get("uid") != body["request"]["uid"]:
            raise AdmissionFailed(f"/{hook} answered for review {answer.get('uid')!r}, not ours")
        return answer

    async def create(self, obj: dict[str, Any]) -> Admitted:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "?")
        mutated = await self._call("mutate", review(obj))
        if not mutated.get("allowed"):
            raise AdmissionFailed(f"{obj['kind']} {name}: denied by /mutate: {mutated.get('status')}")
        final = obj
        if mutated.get("patch"):
            final = apply_patch(obj, json.loads(base64.b64decode(mutated["patch"])))
        meta = final.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = meta.pop("generateName", "job-") + uuid.uuid4().hex[:5]
        meta["uid"] = str(uuid.uuid4())
        validated = await self._call("validate", review(final))
        if not validated.get("allowed"):
            raise AdmissionFailed(f"{obj['kind']} {name}: denied by /validate: {validated.get('status')}")
        return Admitted(obj=final, warnings=[*(mutated.get("warnings") or []), *(validated.get("warnings") or [])])

    async def ready(self) -> bool:
        return await self.ready_status() == 200

    async def ready_status(self) -> int | None:
        """The status /readyz answers, or None while nothing answers at all (not listening yet)."""
        assert self._session is not None
        try:
            async with self._session.get(f"{self.base_url}/readyz", ssl=self._ssl) as resp:
                return resp.status
        except (aiohttp.ClientError, OSError):
            return None
