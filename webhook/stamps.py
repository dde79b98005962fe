"""What the webhook writes on a held object for the manager watcher: its pod sets and priority.

The reconciler may not import the webhook's per-kind pod-set code, so the webhook leaves its
result on the object, as canonical JSON (sorted keys, no spaces; requests as integers, CPU in
millicores), and the watcher reads it back for any kind (backfill, ``JobUpdated``). The webhook
recomputes both at every CREATE and UPDATE: a value a user writes is simply overwritten.

- ``kdispatch.io/pod-sets``: ``[{"count": 2, "minCount": 1, "name": "main", "requests": {"cpu": 500}}]``
  (``minCount`` only when set), in the kind's pod-set order; ``nodeSelector``, ``nodeAffinity``,
  ``tolerations``, ``topology`` and ``group`` too when set (values as the log encodes them);
- ``kdispatch.io/priority``: ``{"class": "high", "value": 1000}`` (``class`` only when the job
  names one; ``value`` as configured here, else 0 and the reconciler resolves the class).

``update_msg_id`` is the Nats-Msg-Id of a ``JobUpdated``, the same from the webhook and from the
watcher for the same change, so the inbox keeps one of them; ``submitted_msg_id`` that of a
``JobSubmitted``, one per job uid, so the watcher's backfill of a job the webhook did record (but
the log had not folded yet) is dropped by the inbox.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventlog import events as ev

_encoder = msgspec.json.Encoder(order="sorted")


def pod_sets_json(sets: list[ev.PodSet]) -> str:
    out: list[dict[str, Any]] = []
    for s in sets:
        item: dict[str, Any] = {"count": s.count, "name": s.name, "requests": dict(s.requests)}
        if s.min_count is not None:
            item["minCount"] = s.min_count
        # What the pods ask of nodes (#15), only when set: the stamps of other jobs stay as they were.
        for key, value in (
            ("nodeSelector", s.node_selector),
            ("nodeAffinity", s.node_affinity),
            ("tolerations", s.tolerations),
            ("topology", s.topology),
            ("group", s.group),
        ):
            if value:
                item[key] = msgspec.to_builtins(value)
        out.append(item)
    return _encoder.encode(out).decode()


def priority_json(name: str | None, value: int) -> str:
    return _encoder.encode({"value": value} if name is None else {"class": name, "value": value}).decode()


def update_msg_id(uid: str, previous_resource_version: str) -> str:
    """One change of one object: the version it was made to (the webhook sees it as the old
    object's resourceVersion at /validate; the watcher as the version before the change)."""
    return f"upd/{uid}/{previous_resource_version}"


def submitted_msg_id(uid: str) -> str:
    """One submission per job object: the webhook's and the manager watcher's backfill of the same
    job carry the same id, so JetStream keeps the first (within the inbox's duplicate window)."""
    return f"sub/{uid}"
