"""A Kubernetes API server stand-in on kmock's public API: ``kmock.KubernetesScaffold`` answers
discovery and renders errors as Kubernetes ``Status`` objects; the object store and the verbs are
kept here, registered as kmock fallback reactions.

What the real API does and kmock's own KubernetesEmulator does not (so the adapter stays honest):
- ``metadata.uid``, ``resourceVersion`` (one counter per server), ``creationTimestamp``,
  ``generation`` (bumped on spec changes only);
- create of an existing name -> 409 AlreadyExists; delete honours ``preconditions.uid`` (409);
- PATCH is a JSON merge patch (``null`` removes a key); the ``status`` subresource changes only
  ``status``, and a PATCH of the object itself ignores ``status``;
- finalizers: deleting an object that has ``metadata.finalizers`` only sets its
  ``deletionTimestamp`` (a MODIFIED event); it is deleted once a patch leaves no finalizer;
- list and watch honour ``labelSelector`` (``k=v``, ``k!=v``, ``k``, ``!k``); a list carries the
  collection's resourceVersion; a watch from a resourceVersion replays the events after it, or
  answers 410 Gone (an ERROR event) when that version was compacted away (``compact()``);
  ``timeoutSeconds`` ends a watch;
- resources must be declared (``serve(...)``): an undeclared one is a 404, like a CRD that is not
  installed; discovery names each with its singular (``kubectl describe job`` needs it);
- Events (``serve_events()``): written through ``events.k8s.io/v1`` and readable through core
  ``v1`` too, converted as the API server converts them (regarding -> involvedObject, note ->
  message, series.count -> count); lists honour ``fieldSelector`` (``involvedObject.name=x``,
  ``regarding.name=x``), and answer the Table kubectl asks for (its columns for events) so
  ``kubectl get events`` shows what the real server shows.

- ``/api/v1/namespaces`` (and ``/api/v1/namespaces/NAME``) are the Namespace objects themselves,
  not a namespace's contents. kmock reads a path's ``namespaces/X`` as "in namespace X" and cannot
  parse the bare list at all, so those two paths are renamed on the way in (``__call__``) to a
  cluster-scoped resource kmock does parse; ``_key`` maps it back to ``("", "v1", "namespaces")``.

It counts the lists it served (``lists``), so a test can tell that a watcher re-listed.

Run it with ``kmock.Server(emulator, port=...)``; stopping the server and starting another on the
same port with the same emulator is a worker that went away and came back with its objects.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import attrs
import kmock

Key = tuple[str, str, str]  # (group, version, plural)
EVENTS: Key = ("events.k8s.io", "v1", "events")
CORE_EVENTS: Key = ("", "v1", "events")
NAMESPACES: Key = ("", "v1", "namespaces")
VERBS = ["create", "delete", "get", "list", "patch", "watch"]

# The plural the Namespace paths are renamed to before kmock parses them (see __call__). Not a
# valid Kubernetes resource name, so no declared resource can collide with it.
_NAMESPACES_ALIAS = "namespaces.cluster-scoped"
_NAMESPACES_PATH = re.compile(r"/api/v1/namespaces(/[^/]+)?/?")


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for raw in filter(None, (s.strip() for s in selector.split(","))):
        if "!=" in raw:
            k, v = raw.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in raw:
            k, v = raw.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif raw.startswith("!"):
            if raw[1:] in labels:
                return False
        elif raw not in labels:
            return False
    return True


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def fields_match(selector: str, obj: dict[str, Any]) -> bool:
    """A field selector (``a.b=x,c!=y``) on the object's own fields, as each API names them."""
    for raw in filter(None, (s.strip() for s in selector.split(","))):
        if "!=" in raw:
            k, v = raw.split("!=", 1)
            if _field(obj, k.strip()) == v.strip():
                return False
        else:
            k, v = raw.replace("==", "=").split("=", 1)
            if _field(obj, k.strip()) != v.strip():
                return False
    return True


def core_event(obj: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as core v1 shows it (the API server's conversion)."""
    series = obj.get("series")
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": copy.deepcopy(obj["metadata"]),
        "involvedObject": copy.deepcopy(obj.get("regarding") or {}),
        "reason": obj.get("reason", ""),
        "message": obj.get("note", ""),
        "type": obj.get("type", ""),
        "action": obj.get("action", ""),
        "eventTime": obj.get("eventTime"),
        "reportingComponent": obj.get("reportingController", ""),
        "reportingInstance": obj.get("reportingInstance", ""),
        "source": {"component": obj.get("reportingController", "")},
        "count": int(series["count"]) if series else 1,
    }
    if series:
        out["series"] = copy.deepcopy(series)
    return out


def _age(stamp: str) -> str:
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    seconds = max(0, int((datetime.datetime.now(tz=datetime.UTC) - then).total_seconds()))
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def events_table(items: list[dict[str, Any]], *, resource_version: str) -> dict[str, Any]:
    """The Table the API server answers ``kubectl get events`` with (its default columns)."""
    columns = ["Last Seen", "Type", "Reason", "Object", "Message"]
    rows = []
    for obj in items:
        regarding = obj.get("involvedObject") or obj.get("regarding") or {}
        last = (obj.get("series") or {}).get("lastObservedTime") or obj.get("eventTime") or ""
        cells = [
            _age(last),
            obj.get("type", ""),
            obj.get("reason", ""),
            f"{str(regarding.get('kind', '')).lower()}/{regarding.get('name', '')}",
            obj.get("message", obj.get("note", "")),
        ]
        meta = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append({"cells": cells, "object": meta})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": c, "type": "string", "format": "", "description": c, "priority": 0} for c in columns
        ],
        "rows": rows,
    }


class _Watcher:
    def __init__(self, key: Key, namespace: str | None, selector: str) -> None:
        self.key = key
        self.namespace = namespace
        self.selector = selector
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()  # None: connection dropped

    def wants(self, key: Key, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if key != self.key or (self.namespace is not None and meta.get("namespace") != self.namespace):
            return False
        return selector_matches(self.selector, meta.get("labels") or {})


@attrs.define(kw_only=True)
class KubeApiEmulator(kmock.KubernetesScaffold):
    name: str = "cluster"
    _store: dict[Key, dict[tuple[str, str], dict[str, Any]]] = attrs.field(factory=dict, init=False)
    _history: list[tuple[int, Key, str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    _compacted_to: int = attrs.field(default=0, init=False)
    _rv: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _last_rv: int = attrs.field(default=0, init=False)
    _watchers: list[_Watcher] = attrs.field(factory=list, init=False)
    _lists: dict[Key, int] = attrs.field(factory=dict, init=False)
    _kinds: dict[Key, str] = attrs.field(factory=dict, init=False)
    _namespaced: dict[Key, bool] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        # Before kmock's own discovery routes, so this one answers /api/v1: kmock names the core
        # group's version "/v1", which kubectl does not take for the core group (it would then
        # resolve "events" to events.k8s.io, where involvedObject.* selectors do not exist).
        self.fallback["get /api/v1"] << self._serve_core_version
        super().__attrs_post_init__()  # discovery, and a 404 for what nothing below answers
        # kubernetes-asyncio's VersionApi asks for "/version/"; the real server answers both.
        self.fallback["get /version/"] << self._serve_kube_version
        self.fallback[kmock.action.LIST] << self._serve_list  # and watch=True (see there)
        self.fallback[kmock.action.WATCH] << self._serve_watch
        self.fallback[kmock.action.FETCH] << self._serve_fetch
        self.fallback[kmock.action.CREATE] << self._serve_create
        self.fallback[kmock.action.UPDATE] << self._serve_update
        self.fallback[kmock.action.DELETE] << self._serve_delete

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        match = _NAMESPACES_PATH.fullmatch(raw_request.path)
        if match:
            path = f"/api/v1/{_NAMESPACES_ALIAS}{match.group(1) or ''}"
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.with_path(path, keep_query=True))
        return await super().__call__(raw_request)

    async def _serve_core_version(self, _request: kmock.Request) -> Any:
        return {
            "apiVersion": "v1",  # of the APIResourceList
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": plural,
                    "kind": self._kinds[key] or plural.capitalize(),
                    "singularName": self._kinds[key].lower() or plural,
                    "shortNames": [],
                    "categories": [],
                    "verbs": VERBS,
                    "namespaced": self._namespaced[key],
                }
                for key in self._kinds
                for group, version, plural in [key]
                if (group, version) == ("", "v1")
            ],
        }

    # -- declaring resources, test-side access ---------------------------------------------------

    def serve(
        self, group: str, version: str, plural: str, *, kind: str = "", namespaced: bool = True
    ) -> None:
        self._store.setdefault((group, version, plural), {})
        self._kinds[(group, version, plural)] = kind
        self._namespaced[(group, version, plural)] = namespaced
        self.resources[f"{group}/{version}/{plural}" if group else f"v1/{plural}"] = kmock.ResourceInfo(
            kind=kind or None,
            singular=kind.lower() or None,
            namespaced=namespaced,
            verbs=set(VERBS),
        )

    def serve_events(self) -> None:
        """``events.k8s.io/v1`` events, and the same objects as core ``v1`` events."""
        self.serve(*EVENTS, kind="Event")
        self.serve(*CORE_EVENTS, kind="Event")

    def _mirror_event(self, obj: dict[str, Any]) -> None:
        """Keep the core v1 view of an events.k8s.io Event (one object, two APIs)."""
        if CORE_EVENTS in self._store:
            meta = obj["metadata"]
            self._store[CORE_EVENTS][(meta["namespace"], meta["name"])] = core_event(obj)

    def objects(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self._store.get((group, version, plural), {}).values()]

    def peek(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        """The stored objects themselves, not copies (``objects``): for a read-only scan of many
        objects, often (the soak's controllers); do not change them."""
        return list(self._store.get((group, version, plural), {}).values())

    def delete(self, group: str, version: str, plural: str, namespace: str, name: str) -> None:
        """Delete an object as the API server does, with a DELETED watch event (``remove``
        deletes one silently)."""
        key = (group, version, plural)
        current = self._store.get(key, {}).pop((namespace, name), None)
        if current is not None:
            current["metadata"]["resourceVersion"] = str(self._next_rv())
            self._emit(key, "DELETED", current)

    def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._store.get((group, version, plural), {}).get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def put(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object directly (what another controller would do). A ``metadata.uid`` given
        is kept: the API server assigns it before the admission webhooks see the object."""
        return self._create(
            (group, version, plural), obj.get("metadata", {}).get("namespace", ""), obj, keep_uid=True
        )

    def patch_status(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Change an object's status the way its controller (or Kueue) would."""
        return self._patch(
            (group, version, plural), namespace, name, {"status": status}, subresource="status"
        )

    def remove(self, group: str, version: str, plural: str, namespace: str, name: str) -> None:
        """Remove an object without a watch event: what a watcher that was disconnected (or
        whose watch lost the event) finds out only by listing again."""
        del self._store[(group, version, plural)][(namespace, name)]

    def update(
        self, group: str, version: str, plural: str, namespace: str, name: str, body: Any
    ) -> dict[str, Any]:
        """A merge patch of the object (not its status), as a client's PATCH."""
        return self._patch((group, version, plural), namespace, name, body, subresource=None)

    def created(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        """Every object created in the resource, in order (deleted ones too)."""
        key = (group, version, plural)
        return [copy.deepcopy(obj) for _, k, kind, obj in self._history if k == key and kind == "ADDED"]

    def lists(self, group: str, version: str, plural: str) -> int:
        """How many lists (not watches) of the resource were served."""
        return self._lists.get((group, version, plural), 0)

    def drop_watches(self) -> None:
        """End every open watch stream, as a crashing server drops its connections."""
        for w in self._watchers:
            w.queue.put_nowait(None)

    def compact(self) -> None:
        """Forget the event history: a watch from an older resourceVersion now gets 410 Gone."""
        self._compacted_to = self._last_rv
        self._history.clear()

    # -- the API ----------------------------------------------------------------------------------

    async def _serve_kube_version(self, _request: kmock.Request) -> Any:
        # every field: kubernetes-asyncio's VersionInfo rejects a missing one
        return {
            "major": "1",
            "minor": "31",
            "gitVersion": "v1.31.0",
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2024-08-13T00:00:00Z",
            "goVersion": "go1.22.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _key(self, request: kmock.Request) -> Key:
        res = request.resource
        assert res is not None
        key = (str(res.group or ""), str(res.version or ""), str(res.plural or ""))
        if key == ("", "v1", _NAMESPACES_ALIAS):
            key = NAMESPACES
        if key not in self._store:
            raise kmock.KubernetesResourceNotFoundError()
        return key

    def _next_rv(self) -> int:
        self._last_rv = next(self._rv)
        return self._last_rv

    def _emit(self, key: Key, kind: str, obj: dict[str, Any]) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self._history.append((rv, key, kind, snapshot))
        for w in self._watchers:
            if w.wants(key, snapshot):
                w.queue.put_nowait({"type": kind, "object": snapshot})

    def _create(
        self, key: Key, namespace: str, body: dict[str, Any], *, keep_uid: bool = False
    ) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace or meta.get("namespace", "")
        name = meta.get("name")
        if not name:
            raise kmock.KubernetesError(status=422, reason="Invalid", message="metadata.name: Required value")
        if (meta["namespace"], name) in self._store[key]:
            raise kmock.KubernetesError(
                status=409, reason="AlreadyExists", message=f'{key[2]} "{name}" already exists'
            )
        meta.update(
            uid=meta["uid"] if keep_uid and meta.get("uid") else str(uuid.uuid4()),
            resourceVersion=str(self._next_rv()),
            creationTimestamp=_now(),
            generation=1,
        )
        self._store[key][(meta["namespace"], name)] = obj
        if key == EVENTS:
            self._mirror_event(obj)
        self._emit(key, "ADDED", obj)
        return copy.deepcopy(obj)

    def _patch(
        self, key: Key, namespace: str, name: str, body: Any, *, subresource: str | None
    ) -> dict[str, Any]:
        current = self._store[key].get((namespace, name))
        if current is None:
            raise kmock.KubernetesObjectNotFoundError()
        body = dict(body or {})
        if subresource == "status":
            body = {"status": body.get("status")} if "status" in body else {}
        else:
            body.pop("status", None)
        updated = merge_patch(current, body)
        if updated.get("spec") != current.get("spec"):
            updated["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        updated["metadata"]["resourceVersion"] = str(self._next_rv())
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            del self._store[key][(namespace, name)]  # the last finalizer went: now it is deleted
            self._emit(key, "DELETED", updated)
            return copy.deepcopy(updated)
        self._store[key][(namespace, name)] = updated
        if key == EVENTS:
            self._mirror_event(updated)
        self._emit(key, "MODIFIED", updated)
        return copy.deepcopy(updated)

    async def _serve_create(self, request: kmock.Request) -> Any:
        created = self._create(self._key(request), request.namespace or "", request.data or {})
        return kmock.Response(status=201, payload=created)  # clients map only 201 to the object

    async def _serve_update(self, request: kmock.Request) -> Any:
        key = self._key(request)
        assert request.name is not None
        return self._patch(
            key, request.namespace or "", request.name, request.data, subresource=request.subresource
        )

    async def _serve_delete(self, request: kmock.Request) -> Any:
        key = self._key(request)
        current = self._store[key].get((request.namespace or "", request.name or ""))
        if current is None:
            raise kmock.KubernetesObjectNotFoundError()
        want_uid = ((request.data or {}).get("preconditions") or {}).get("uid")
        if want_uid and want_uid != current["metadata"]["uid"]:
            raise kmock.KubernetesError(
                status=409, reason="Conflict", message="Precondition failed: UID mismatch"
            )
        current["metadata"]["resourceVersion"] = str(self._next_rv())
        if current["metadata"].get("finalizers"):  # marked for deletion; its controllers finish it
            current["metadata"].setdefault("deletionTimestamp", _now())
            self._emit(key, "MODIFIED", current)
            return copy.deepcopy(current)
        del self._store[key][(request.namespace or "", request.name or "")]
        self._emit(key, "DELETED", current)
        return copy.deepcopy(current)

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        obj = self._store[self._key(request)].get((request.namespace or "", request.name or ""))
        if obj is None:
            raise kmock.KubernetesObjectNotFoundError()
        return copy.deepcopy(obj)

    def _select(self, request: kmock.Request, key: Key) -> list[dict[str, Any]]:
        selector = request.params.get("labelSelector", "")
        fields = request.params.get("fieldSelector", "")
        out = []
        for (ns, _), obj in self._store[key].items():
            if request.namespace is not None and ns != request.namespace:
                continue
            if selector_matches(selector, obj["metadata"].get("labels") or {}) and fields_match(fields, obj):
                out.append(copy.deepcopy(obj))
        return out

    async def _serve_list(self, request: kmock.Request) -> Any:
        key = self._key(request)
        if request.params.get("watch", "").lower() in ("true", "1"):
            # kubernetes-asyncio sends watch=True; kmock only recognises "true" as a watch.
            return self._serve_watch(request)
        self._lists[key] = self._lists.get(key, 0) + 1
        items = self._select(request, key)
        if key in (EVENTS, CORE_EVENTS) and "as=Table" in request.headers.get("Accept", ""):
            return events_table(items, resource_version=str(self._last_rv))
        return {
            # typed clients (kubectl describe's event search) decode only "<Kind>List" of the group
            "kind": f"{self._kinds.get(key) or 'Object'}List",
            "apiVersion": f"{key[0]}/{key[1]}" if key[0] else key[1],
            "metadata": {"resourceVersion": str(self._last_rv)},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        key = self._key(request)
        yield b""
        rv_text = request.params.get("resourceVersion", "")
        timeout = float(request.params.get("timeoutSeconds", "0") or 0) or None
        watcher = _Watcher(key, request.namespace, request.params.get("labelSelector", ""))
        if rv_text in ("", "0"):
            for obj in self._select(request, key):
                watcher.queue.put_nowait({"type": "ADDED", "object": obj})
        else:
            since = int(rv_text)
            if since < self._compacted_to:
                yield {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "code": 410,
                        "reason": "Expired",
                        "message": "too old resource version",
                    },
                }
                return
            for rv, k, kind, obj in self._history:
                if rv > since and watcher.wants(k, obj):
                    watcher.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
        self._watchers.append(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        try:
            while True:
                wait = None if deadline is None else deadline - loop.time()
                if wait is not None and wait <= 0:
                    return
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    return
                if event is None:
                    return
                yield event
        finally:
            self._watchers.remove(watcher)
