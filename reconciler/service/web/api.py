"""``/api/v1``: queues, clusters, jobs (filtered, paginated) and one job's timeline and explanation.

Everything is computed from a folded core state with ``reconciler.view`` (what ``kdispatch
status`` and ``queue`` print), so the API agrees with ``explain`` and ``replay``. The state is read
between two awaits of the event loop that folds it, so one response is one consistent state.

A replica that is not leading has no current state: it answers 503 and says so (a standby does not
follow the log; ask the leader, e.g. through a Service selecting the leader's readiness).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import time
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from eventlog.store import LogReader
from reconciler import core, view
from reconciler.core import phases
from reconciler.forecast import Forecast
from reconciler.service.web.access import KubeAccess, ReviewFailed, User, bearer

T = TypeVar("T")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# A job's timeline is read from the log, from its submission on; past this many entries the
# page shows what it has and says the rest is in `kdispatch explain`.
TIMELINE_SCAN_MAX = 200_000


@dataclass(frozen=True)
class Board:
    """The whole-state rows at one log position: what every list response is cut from."""

    seq: int
    at_ms: int
    summary: dict[str, Any]
    queues: list[view.QueueRow]
    clusters: list[view.ClusterRow]
    jobs: list[view.JobRow]  # in list order (``view.job_rows``)
    by_key: dict[str, view.JobRow]


@dataclass
class ViewSource:
    """Where the views read from. ``state()`` is None while there is nothing to show
    (``unavailable`` says why); ``reader`` gives a job's timeline (None: no timelines)."""

    state: Callable[[], core.State | None]
    reader: LogReader | None = None
    unavailable: str = "this replica is not the leader: it has no current state (ask the leader)"
    # The leader's start-time estimates (``service.forecasts``); None: the rows have none.
    forecast: Callable[[], Forecast | None] | None = None
    # The rows are computed on the leader's event loop, between two of its batches: on a busy
    # leader, at most once per this many seconds (responses say which ``seq`` they show).
    refresh_s: float = 1.0
    _board: Board | None = None
    _stamp: tuple[int, int, int] | None = None
    _made_at: float = field(default=-1e9)

    def board(self, state: core.State) -> Board:
        forecast = self.forecast() if self.forecast is not None else None
        stamp = (id(state), state.seq, id(forecast))
        now = time.monotonic()
        if self._board is not None and (stamp == self._stamp or now - self._made_at < self.refresh_s):
            return self._board
        summary = core.summary(state, jobs=False)  # the rows are the jobs' part: not held twice
        jobs = view.job_rows(state, summary, estimates=forecast.estimates if forecast is not None else None)
        self._board = Board(
            seq=state.seq,
            at_ms=state.now_ms,
            summary=summary,
            queues=view.queue_rows(state, summary),
            clusters=view.cluster_rows(state),
            jobs=jobs,
            by_key={r.key: r for r in jobs},
        )
        self._stamp, self._made_at = stamp, now
        return self._board


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(doc), status=status, content_type="application/json", headers=_NO_STORE
    )


_NO_STORE = {"Cache-Control": "no-store"}


def _error(err: ApiError) -> web.Response:
    resp = _json({"error": str(err), **err.extra}, status=err.status)
    if err.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="kdispatch"'
    return resp


def add_api_routes(app: web.Application, source: ViewSource, access: KubeAccess | None = None) -> None:
    """``access`` None: everyone sees everything (the demo). Else every request needs a bearer
    token; queue and cluster rows (counts, no names) are shown to any authenticated user, jobs
    only in the namespaces whose Jobs the user may list."""

    async def viewer(request: web.Request) -> User | None:
        if access is None:
            return None
        token = bearer(request.headers.get("Authorization"))
        if token is None:
            raise ApiError(401, "authorization: no bearer token (send `Authorization: Bearer TOKEN`, a Kubernetes token of the manager cluster)")
        user = await _checked(access.user(token))
        if user is None:
            raise ApiError(401, "authorization: the manager cluster does not accept this token (expired or not one of its tokens)")
        return user

    async def readable(user: User | None, namespaces: set[str]) -> set[str] | None:
        """None: no restriction."""
        if access is None or user is None:
            return None
        return await _checked(access.readable(user, namespaces))

    def current() -> tuple[core.State, Board]:
        state = source.state()
        if state is None:
            raise ApiError(503, source.unavailable)
        return state, source.board(state)

    def envelope(board: Board, **doc: Any) -> dict[str, Any]:
        return {"seq": board.seq, "at_ms": board.at_ms, **doc}

    async def queues(request: web.Request) -> web.Response:
        try:
            await viewer(request)
            _, board = current()
        except ApiError as err:
            return _error(err)
        return _json(envelope(board, items=board.queues))

    async def clusters(request: web.Request) -> web.Response:
        try:
            await viewer(request)
            _, board = current()
        except ApiError as err:
            return _error(err)
        return _json(envelope(board, items=board.clusters))

    async def jobs(request: web.Request) -> web.Response:
        try:
            user = await viewer(request)
            _, board = current()
            query = request.query
            limit = _limit(query.get("limit"))
            after = _decode_continue(query.get("continue"))
            phase = _phase(query.get("phase") or None)
            queue = query.get("queue") or None
            known = [q.name for q in board.queues]
            if queue is not None and queue not in known:
                raise ApiError(404, f"queue: no queue {queue!r}" + _did_you_mean(queue, known), queues=known)
            allowed = await readable(user, {r.namespace for r in board.jobs})
        except ApiError as err:
            return _error(err)
        rows = [
            r
            for r in board.jobs
            if (queue is None or r.queue == queue)
            and (phase is None or r.phase == phase)
            and (allowed is None or r.namespace in allowed)
        ]
        total = len(rows)
        if after is not None:
            rows = [r for r in rows if _order(r) > after]
        page = rows[:limit]
        token = _encode_continue(_order(page[-1])) if len(rows) > limit else None
        return _json(envelope(board, items=page, total=total, **{"continue": token}))

    async def job(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        key = f"{namespace}/{request.match_info['name']}"
        try:
            user = await viewer(request)
            # Before looking the job up: whether a job exists in a namespace is not for everyone.
            if user is not None and namespace not in (await readable(user, {namespace}) or set()):
                raise ApiError(403, f"forbidden: {user.name} may not list jobs in namespace {namespace!r}")
            state, board = current()
            row = board.by_key.get(key)
            if row is None:
                known = list(board.by_key)
                if user is not None:  # suggest only names this user may see
                    known = [k for k in known if k.startswith(namespace + "/")]
                raise ApiError(404, f"no job {key} (up to log seq {board.seq})" + _did_you_mean(key, known))
            # The explanation is of the state now (its own ``seq``); the row may be up to
            # ``refresh_s`` older on a busy leader.
            explanation = view.explanation(state, key)
            timeline, truncated = await _timeline(source.reader, key, from_seq=row.submitted_seq, until_seq=board.seq)
            if user is not None:
                # Preemptions name other jobs (preemptor, victims): those of namespaces this user
                # may not read are shown as `NS/(hidden)`: the namespace, not the name.
                keys = board.by_key.keys()
                named = _namespaces([explanation, timeline], keys) - {namespace}
                hidden = named - (await readable(user, named) or set())
                explanation = _redact(explanation, hidden, keys)
                timeline = [_redact_row(t, hidden, keys) for t in timeline]
        except ApiError as err:
            return _error(err)
        return _json(
            envelope(board, job=row, explanation=explanation, timeline=timeline, timeline_truncated=truncated)
        )

    app.router.add_get("/api/v1/queues", queues)
    app.router.add_get("/api/v1/clusters", clusters)
    app.router.add_get("/api/v1/jobs", jobs)
    # A name is the rest of the path: names come from users, and a slash must not make a 404.
    app.router.add_get("/api/v1/jobs/{namespace}/{name:.+}", job)


async def _checked(review: Awaitable[T]) -> T:
    try:
        return await review
    except ReviewFailed as err:
        raise ApiError(503, str(err)) from None


def _namespaces(doc: Any, keys: Container[str]) -> set[str]:
    """Namespaces of the job references anywhere in ``doc``: ``{"namespace", "name", ...}``
    objects, and strings that are the key of a job (``ns/name``)."""
    out: set[str] = set()
    if isinstance(doc, msgspec.Struct):
        doc = msgspec.to_builtins(doc)
    if isinstance(doc, dict):
        if isinstance(doc.get("namespace"), str) and "name" in doc:
            out.add(doc["namespace"])
        for value in doc.values():
            out |= _namespaces(value, keys)
    elif isinstance(doc, list):
        for value in doc:
            out |= _namespaces(value, keys)
    elif isinstance(doc, str) and doc in keys:
        out.add(doc.split("/", 1)[0])
    return out


HIDDEN_NAME = "(hidden)"


def _redact(doc: Any, hidden: set[str], keys: Container[str]) -> Any:
    if not hidden:
        return doc
    if isinstance(doc, dict):
        if doc.get("namespace") in hidden and "name" in doc:
            return {"namespace": doc["namespace"], "name": HIDDEN_NAME}
        return {k: _redact(v, hidden, keys) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact(v, hidden, keys) for v in doc]
    if isinstance(doc, str) and doc in keys and doc.split("/", 1)[0] in hidden:
        return f"{doc.split('/', 1)[0]}/{HIDDEN_NAME}"
    return doc


def _redact_row(row: view.TimelineRow, hidden: set[str], keys: Container[str]) -> view.TimelineRow:
    fields = _redact(row.fields, hidden, keys)
    if fields == row.fields:
        return row
    text = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in fields.items())
    return msgspec.structs.replace(row, fields=fields, text=text)


async def _timeline(
    reader: LogReader | None, key: str, *, from_seq: int, until_seq: int
) -> tuple[list[view.TimelineRow], bool]:
    if reader is None or until_seq < 1:
        return [], False
    start = max(from_seq, 1)  # the job's JobSubmitted: nothing about it comes before
    rows: list[view.TimelineRow] = []
    scanned = 0
    async for batch in reader.read(from_seq=start, until_seq=until_seq):
        for entry in batch:
            if view.concerns(entry.event, key):
                rows.append(view.timeline_row(entry))
        scanned += len(batch)
        if scanned >= TIMELINE_SCAN_MAX:
            return rows, True
    return rows, False


def _order(row: view.JobRow) -> list[Any]:
    """The list's sort order (``view.job_rows``) as a comparable value: the continue token."""
    return [row.position is None, row.queue, row.position or 0, row.key]


def _encode_continue(order: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(order).encode()).decode().rstrip("=")


def _decode_continue(token: str | None) -> list[Any] | None:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        order = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        order = None
    if (
        not isinstance(order, list)
        or len(order) != 4
        or not isinstance(order[0], bool)
        or not isinstance(order[1], str)
        or not isinstance(order[2], int)
        or not isinstance(order[3], str)
    ):
        raise ApiError(400, "continue: not a token this API gave out (pass the `continue` of the previous page as is)")
    return order


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ApiError(400, f"limit: {text!r} is not a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def _phase(text: str | None) -> str | None:
    if text is None:
        return None
    if text not in phases.ALL:
        raise ApiError(
            400, f"phase: {text!r} is not a job phase; one of {', '.join(phases.ALL)}" + _did_you_mean(text, list(phases.ALL))
        )
    return text


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=3, cutoff=0.6)
    return f" (did you mean: {', '.join(close)}?)" if close else ""
