"""The Kubernetes side of the soak (bench/soak.py), in its own process: the manager cluster's
API stand-in and the worker clusters', each a kmock API server (tests/reconciler/clusters/
kubeapi.py), and the workers' "controllers": a copy kdispatch creates starts at once and
completes after a runtime (seeded per job), as the Job controller would on a worker without
Kueue. With ``--ttl-after-finished S`` a completed job is deleted from the manager S seconds
later, as Kubernetes' TTL-after-finished controller does. A worker that is silenced keeps running (and keeping) its copies, as a cut-off cluster
does; restored, it comes back with them, stale or not.

Control (HTTP on 127.0.0.1, for the soak driver):
  POST /submit            a Job the API server stores after admission (the webhook allowed it)
  POST /silence/NAME      the worker's API server goes away (its objects stay)
  POST /restore/NAME      ... and comes back on the same port with them
  GET  /copies            {job uid: [[worker, attempt, running], ...]} of every copy now

    python tests/soak/world.py --dir DIR --workers 3 --seed 1
writes DIR/world.json ({"manager": URL, "workers": {NAME: URL}, "control": URL}) once serving.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import faulthandler
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.reconciler.clusters.conftest import ApiServer, serve_jobs
from tests.reconciler.clusters.kubeapi import KubeApiEmulator

JOBS = ("batch", "v1", "jobs")
NODES = ("", "v1", "nodes")
ATTEMPT = "kdispatch.io/attempt"
JOB_UID = "kdispatch.io/job-uid"


def _stamp() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _request_lists(obj: Any, seen: set[int], found: list[list[Any]]) -> list[list[Any]]:
    """Every list of served requests kmock keeps under ``obj`` (the server's and each view's)."""
    if id(obj) in seen:
        return found
    seen.add(id(obj))
    requests = getattr(obj, "_requests", None)
    if isinstance(requests, list):
        found.append(requests)
    for attr in ("_payloads", "_source"):
        child = getattr(obj, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, (str, bytes, int, float)):
                _request_lists(item, seen, found)
    return found


def _clear_requests(obj: Any, seen: set[int]) -> None:
    for requests in _request_lists(obj, seen, []):
        requests.clear()


# Per emulator (by id): requests routed so far, and its request lists. Kept outside the object:
# kmock's DSL answers any attribute read or write on its views.
_ROUTED: dict[int, tuple[int, list[list[Any]]]] = {}


class _ForgetfulEmulator(KubeApiEmulator):
    """Routes each request seeing only itself (``World.forget_requests`` says why requests are
    dropped at all). kmock routes a request by testing it against every request each view has
    seen, so clearing ten times a second left a cost that grows with the square of the request
    rate, and worse once this process saturates (the clearing task then runs late): over the
    60-minute soak it ran 97 % busy, 86 % in kmock's ``View.__contains__`` (py-spy), and the
    reconcilers' reads of the manager timed out. Per request it is now ~2 ms flat."""

    async def _handle(self, request: Any) -> Any:
        routed, lists = _ROUTED.get(id(self), (0, []))
        if routed % 1000 == 0:  # views made after start-up are found too
            lists = _request_lists(self, set(), [])
        _ROUTED[id(self)] = (routed + 1, lists)
        for requests in lists:
            requests.clear()
        self._requests.append(request)  # a request is routed before its handler first awaits
        return await super()._handle(request)


class World:
    def __init__(
        self, workers: int, *, seed: int, runtime_s: tuple[float, float], node_cpus: int, ttl_s: float = 0.0
    ) -> None:
        self.seed = seed
        self.ttl_s = ttl_s
        self.finished: dict[tuple[str, str], float] = {}  # manager job (namespace, name) -> when seen complete
        self.runtime_s = runtime_s
        self.node_cpus = node_cpus
        self.manager = ApiServer(emulator=_ForgetfulEmulator(name="manager"))
        self.workers = {f"w{i + 1}": ApiServer(emulator=_ForgetfulEmulator(name=f"w{i + 1}")) for i in range(workers)}
        self.started: dict[tuple[str, str], float] = {}  # (worker, copy uid) -> when it started

    async def start(self) -> None:
        for srv in (self.manager, *self.workers.values()):
            serve_jobs(srv.emulator)
            await srv.emulator.__aenter__()
            await srv.start()
        for name, srv in self.workers.items():
            for n in range(2):
                srv.emulator.put(
                    *NODES,
                    {
                        "metadata": {"name": f"{name}-node{n}", "namespace": ""},
                        "status": {"allocatable": {"cpu": str(self.node_cpus), "memory": "256Gi", "pods": "500"}},
                    },
                )

    async def forget_requests(self) -> None:
        """kmock keeps every request it served and routes each new one by scanning them (it is
        made for tests that assert on them): over minutes that is quadratic, and the servers
        stall. Nothing here asserts on past requests, so they are dropped ten times a second
        (a request is routed before its handler first awaits, so none is dropped mid-routing).
        kmock has no public call for this; its lists are cleared in place."""
        while True:
            await asyncio.sleep(0.1)
            for srv in (self.manager, *self.workers.values()):
                _clear_requests(srv.emulator, set())

    async def compact(self, every_s: float = 120.0) -> None:
        """Forget the servers' event history now and then, as etcd compacts (every 5 minutes by
        default): kmock keeps a copy of every event for watches that resume, and over a long run
        those copies (millions of dicts) make each garbage collection stall this process for
        seconds. A watch resuming from before a compaction gets 410 Gone and lists again, as
        against a real API server."""
        while True:
            await asyncio.sleep(every_s)
            for srv in (self.manager, *self.workers.values()):
                srv.emulator.compact()

    def runtime(self, uid: str) -> float:
        lo, hi = self.runtime_s
        return random.Random(f"{self.seed}/{uid}").uniform(lo, hi)

    async def controllers(self) -> None:
        """Every worker's Job controller: start a copy, complete it after its runtime."""
        while True:
            now = time.monotonic()
            for name, srv in self.workers.items():
                emu = srv.emulator
                for obj in emu.peek(*JOBS):  # read only; the patches below go through the emulator
                    meta, status = obj["metadata"], obj.get("status") or {}
                    if (obj.get("spec") or {}).get("suspend") or status.get("conditions"):
                        continue
                    key = (name, meta["uid"])
                    if not status.get("startTime"):
                        self.started[key] = now
                        emu.patch_status(*JOBS, meta["namespace"], meta["name"], {"active": 1, "startTime": _stamp()})
                    elif now - self.started.setdefault(key, now) >= self.runtime(meta["uid"]):
                        done = {
                            "active": None,
                            "succeeded": 1,
                            "completionTime": _stamp(),
                            "conditions": [{"type": "Complete", "status": "True"}],
                        }
                        emu.patch_status(*JOBS, meta["namespace"], meta["name"], done)
                        self.started.pop(key, None)
            await asyncio.sleep(0.25)

    async def ttl_after_finished(self) -> None:
        """The manager's TTL-after-finished controller: a job whose status (copied back from its
        placed copy by kdispatch) says it completed is deleted ``ttl_s`` later, so the number of
        jobs on the manager levels off, as on a cluster that cleans up, and the reconcilers' memory
        can too (bench/soak.py judges its growth)."""
        while self.ttl_s > 0:
            now = time.monotonic()
            for obj in self.manager.emulator.peek(*JOBS):  # not copies: this runs every second
                meta, status = obj["metadata"], obj.get("status") or {}
                if status.get("completionTime"):
                    self.finished.setdefault((meta["namespace"], meta["name"]), now)
            for (namespace, name), at in list(self.finished.items()):
                if now - at >= self.ttl_s:
                    self.manager.emulator.delete(*JOBS, namespace, name)  # with its watch event
                    del self.finished[(namespace, name)]
            await asyncio.sleep(1.0)

    def copies(self) -> dict[str, list[list[Any]]]:
        out: dict[str, list[list[Any]]] = {}
        for name, srv in self.workers.items():
            for obj in srv.emulator.objects(*JOBS):
                labels = obj["metadata"].get("labels") or {}
                uid = labels.get(JOB_UID)
                if uid:
                    running = bool((obj.get("status") or {}).get("active"))
                    out.setdefault(uid, []).append([name, int(labels.get(ATTEMPT, 0)), running])
        return out

    def control(self) -> web.Application:
        async def submit(request: web.Request) -> web.Response:
            obj = await request.json()
            self.manager.emulator.put(*JOBS, obj)
            return web.json_response({"ok": True}, status=201)

        closing: dict[str, asyncio.Task[None]] = {}

        async def silence(request: web.Request) -> web.Response:
            # The listener goes at once; the server's shutdown may wait for its open requests
            # (the reconcilers' connections), so it is not awaited here.
            name = request.match_info["name"]
            closing[name] = asyncio.create_task(self.workers[name].kill())
            await asyncio.sleep(0)
            return web.json_response({"ok": True})

        async def restore(request: web.Request) -> web.Response:
            # Not after the old server's shutdown (it may still be draining the connections it
            # had): its listener is closed already, the port can be bound again.
            name = request.match_info["name"]
            srv = self.workers[name]
            for _ in range(50):
                if srv.server is not None:
                    break
                try:
                    await srv.start()
                except OSError:  # the port not released yet
                    srv.server = None
                    await asyncio.sleep(0.2)
            return web.json_response({"ok": srv.server is not None}, status=200 if srv.server else 503)

        async def copies(_request: web.Request) -> web.Response:
            return web.json_response(self.copies())

        app = web.Application(client_max_size=16 << 20)
        app.router.add_post("/submit", submit)
        app.router.add_post("/silence/{name}", silence)
        app.router.add_post("/restore/{name}", restore)
        app.router.add_get("/copies", copies)
        return app


async def run(args: argparse.Namespace) -> None:
    world = World(
        args.workers,
        seed=args.seed,
        runtime_s=(args.runtime_min, args.runtime_max),
        node_cpus=args.node_cpus,
        ttl_s=args.ttl_after_finished,
    )
    await world.start()
    runner = web.AppRunner(world.control(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host="127.0.0.1", port=0)
    await site.start()
    port = runner.addresses[0][1]
    doc = {
        "manager": world.manager.url,
        "workers": {n: s.url for n, s in world.workers.items()},
        "control": f"http://127.0.0.1:{port}",
    }
    out = Path(args.dir) / "world.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.rename(out)  # whole or absent: the driver polls for it
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ctl = asyncio.create_task(world.controllers())
    trim = asyncio.create_task(world.forget_requests())
    ttl = asyncio.create_task(world.ttl_after_finished())
    compaction = asyncio.create_task(world.compact())
    stopping = asyncio.create_task(stop.wait())
    # A helper task that fails ends the world (its traceback in the log), not a silent stall.
    await asyncio.wait({ctl, trim, compaction, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for t in (ctl, trim, ttl, compaction, stopping):
        t.cancel()
    for t in (ctl, trim, ttl, compaction):
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    await runner.cleanup()
    for srv in (world.manager, *world.workers.values()):
        await srv.kill()


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: where it is (its log), to debug a stall
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runtime-min", type=float, default=2.0)
    p.add_argument("--runtime-max", type=float, default=6.0)
    p.add_argument("--node-cpus", type=int, default=64)
    p.add_argument("--ttl-after-finished", type=float, default=0.0, help="delete completed manager jobs after (0: keep)")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
