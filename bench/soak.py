"""Soak: the whole system, as an operator runs it, under mixed load and faults on a seeded schedule.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate 10] [--seed 1] [--dir DIR]

Started here, each its own process: a 3-node NATS cluster (embedded nats-servers, R3 streams,
authorization on as ``kdispatch serve``'s embedded default has it: one nkey user per component,
eventlog/natsauth.py; each process connects as its own user, the checks read as ``reader``),
the webhook (``python -m webhook``, HTTPS), two reconcilers (``kdispatch serve`` x2 on the same
config), and tests/soak/world.py: the manager cluster's API stand-in and three worker clusters
(kmock API servers) whose Job "controllers" run each copy for a few seconds. Jobs enter as the
API server would send them: AdmissionReviews over HTTPS to ``/mutate`` then ``/validate``; an
allowed job is stored on the manager, where the reconcilers' manager watcher sees it (and
backfills it if the webhook allowed it without recording it).

Faults, one every ``--fault-every`` seconds, kinds in a seeded order (each kind once per round):
  leader_kill      SIGKILL the leading reconciler; it is restarted a second later
  nats_restart     stop one nats-server (SIGTERM), start it again 3 s later
  worker_silent    a worker's API server goes away past workerLostTimeout, then comes back
                   with the copies it held (stale ones must be withdrawn)
  webhook_restart  SIGTERM the webhook, start it again
  bad_reviews      a burst of malformed AdmissionReviews (not JSON, invalid UTF-8, no request,
                   oversized)
  overload         a burst of concurrent valid reviews well above the steady rate

At the end (load stopped, then up to ``--settle`` seconds for backfill) it checks:
  - every accepted submission (``allowed: true`` from /validate) is in the log exactly once;
  - no job was placed on two clusters at once (per the log: a Placed while another cluster's
    placement of the job is still open);
  - ``kdispatch replay --verify`` passes on the log;
  - reconciler and webhook RSS grew less than ``--rss-growth`` (5%) over the last half of the
    run, judged on the longest stretch there of one process doing one job (the same instance,
    leading or standing by throughout: see ``rss_growth``), from the end of its warm-up on (once
    it met an overload and a bad-review burst: see ``warmed_up_at``); the samples go to
    ``rss.jsonl`` and ``rss.png`` in the run's directory; completed jobs are deleted from the
    manager after ``--ttl-after-finished``
    (60 s) so that the jobs it holds level off;
and prints the load held (jobs/s), faults survived by kind, the worst time from a fault to the
next decision in the log, and as its last line the headline. Exit 0 when every check holds.
Not part of ``make test``; tests/soak/test_soak.py runs a short configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eventlog import events as ev  # noqa: E402
from eventlog.embedded import EmbeddedError, EmbeddedNats, free_port  # noqa: E402
from eventlog.jetstream import connect  # noqa: E402
from eventlog.natsauth import Credentials, inbox_prefix  # noqa: E402
from reconciler.demo.apiserver import AdmissionFailed, ApiServer  # noqa: E402

KINDS = ("leader_kill", "nats_restart", "worker_silent", "webhook_restart", "bad_reviews", "overload")
# Generous for a busy 2-core machine, where every process here gets a fraction of a core: a
# worker is Lost only after 20 s of failed heartbeats (every 2 s, each allowed 5 s).
WORKER_LOST_S = 20.0
NAMESPACES = ("team-a", "team-b", "team-c")
KDISPATCH = str(Path(sys.executable).parent / "kdispatch")


def say(*parts: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, flush=True)


# -- processes ------------------------------------------------------------------------------------


class Proc:
    """A child process with its log file; restartable with the same argv."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"{self.name}.{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def rss_kb(self) -> int | None:
        pid = self.pid
        if pid is None:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None


def three_nats(root: Path, *, config_file: Path, attempts: int = 3) -> list[EmbeddedNats]:
    """Three nodes with the same ``authorization`` (``config_file``, eventlog.natsauth). A route
    port is picked free and bound a moment later: another process may take it in between, the
    one start-up failure retried (with fresh ports)."""
    for attempt in range(attempts):
        ports = [free_port() for _ in range(3)]
        routes = [f"nats://127.0.0.1:{p}" for p in ports]
        nodes = [
            EmbeddedNats(
                data_dir=root / f"nats{i}",
                server_name=f"n{i}",
                cluster_name="kd-soak",
                cluster_port=ports[i],
                routes=[r for j, r in enumerate(routes) if j != i],
                config_file=config_file,
            )
            for i in range(3)
        ]
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_ready()
            return nodes
        except EmbeddedError as err:
            for node in nodes:
                node.stop()
            if "address already in use" not in str(err) or attempt == attempts - 1:
                raise
            for i in range(3):  # the nodes' stores are empty yet: start afresh
                shutil.rmtree(root / f"nats{i}", ignore_errors=True)
    raise AssertionError("unreachable")


def kubeconfig(path: Path, url: str, name: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": url}}],
                "users": [{"name": name, "user": {"token": f"token-of-{name}"}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
                "current-context": name,
            }
        )
    )
    return str(path)


def reader_config(path: Path, *, nats_url: str, creds: Credentials) -> Path:
    """What ``kdispatch replay`` needs to read the log as the read-only user."""
    path.write_text(yaml.safe_dump({"nats": {"url": nats_url, "replicas": 3, "nkey": str(creds.seed_file("reader"))}}))
    return path


def write_config(path: Path, *, nats_url: str, world: dict[str, Any], data_dir: Path, creds: Credentials) -> Path:
    config = service_config(path, world=world, data_dir=data_dir, manager_id="soak")
    config["nats"] = {"url": nats_url, "replicas": 3, "nkey": str(creds.seed_file("reconciler"))}
    path.write_text(yaml.safe_dump(config))
    return path


def service_config(path: Path, *, world: dict[str, Any], data_dir: Path, manager_id: str) -> dict[str, Any]:
    """``kdispatch serve``'s config for the stand-ins (kubeconfigs written beside ``path``), no NATS."""
    return {
        "dataDir": str(data_dir),
        "policy": {
            "workerLostTimeout": f"{int(WORKER_LOST_S * 1000)}ms",
            "requeueBackoff": "500ms",
            "profiles": [
                {
                    "name": "default",
                    "filters": ["ClusterHealth", "ClusterSelector", "ClusterFeasibility", "ClusterHeadroom"],
                    "scores": ["CapacityScore"],
                    "strategy": {"type": "TopK", "k": 1},
                }
            ],
        },
        "manager": {
            "id": manager_id,
            "kubeconfig": {"path": kubeconfig(path.parent / "manager.kubeconfig", world["manager"], "manager")},
            "resync": "60s",
            "gcInterval": "2s",
        },
        "clusters": [
            {
                "name": name,
                "labels": {"zone": name},
                "kubeconfig": {"path": kubeconfig(path.parent / f"{name}.kubeconfig", url, name)},
                "kueue": False,
                "heartbeatInterval": "2s",
                "heartbeatTimeout": "5s",
            }
            for name, url in sorted(world["workers"].items())
        ],
    }


# -- load ---------------------------------------------------------------------------------------------


def user_job(name: str, namespace: str) -> dict[str, Any]:
    """A batch Job as a user submits it (before the webhook's patch)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "parallelism": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}],
                }
            },
        },
    }


@dataclass
class Tally:
    accepted: dict[str, str] = field(default_factory=dict)  # uid -> ns/name
    denied: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    bad_status: Counter[int] = field(default_factory=Counter)
    overload_status: Counter[str] = field(default_factory=Counter)
    sent: int = 0


class Load:
    def __init__(self, webhook_url: str, ca: Path, control: str, tally: Tally) -> None:
        self.webhook_url = webhook_url
        self.ca = ca
        self.control = control
        self.tally = tally
        self._n = 0
        self._api: ApiServer | None = None
        self._ctl: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Load:
        self._api = await ApiServer(self.webhook_url, ca_file=str(self.ca)).__aenter__()
        self._ctl = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._api is not None:
            await self._api.__aexit__()
        if self._ctl is not None:
            await self._ctl.close()

    def next_job(self) -> dict[str, Any]:
        self._n += 1
        return user_job(f"soak-{self._n:07d}", NAMESPACES[self._n % len(NAMESPACES)])

    async def submit(self, api: ApiServer | None = None, kind: str = "steady") -> None:
        """One job through /mutate and /validate; an allowed one is stored on the manager, as the
        API server stores it (a denied or failed review is not: failurePolicy Fail)."""
        job = self.next_job()
        self.tally.sent += 1
        try:
            admitted = await (api or self._api).create(job)  # type: ignore[union-attr]
        except AdmissionFailed as err:
            text = str(err)
            key = "denied" if "denied" in text else text.split(":", 2)[1].strip()[:40] if ":" in text else text[:40]
            self.tally.errors[f"{kind}: {key}"] += 1
            return
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            self.tally.errors[f"{kind}: {type(err).__name__}"] += 1
            return
        obj = admitted.obj
        meta = obj["metadata"]
        self.tally.accepted[meta["uid"]] = f"{meta['namespace']}/{meta['name']}"
        assert self._ctl is not None
        async with self._ctl.post(self.control + "/submit", json=obj) as resp:
            resp.raise_for_status()

    async def steady(self, rate: float, stop: asyncio.Event, max_in_flight: int = 64) -> None:
        gate = asyncio.Semaphore(max_in_flight)
        tasks: set[asyncio.Task[None]] = set()
        interval = 1.0 / rate
        next_at = time.monotonic()
        while not stop.is_set():
            await gate.acquire()

            async def one() -> None:
                try:
                    await self.submit()
                except Exception as err:  # counted, never the end of the load
                    self.tally.errors[f"steady: {type(err).__name__}"] += 1
                finally:
                    gate.release()

            t = asyncio.create_task(one())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            else:
                next_at = time.monotonic()  # behind: do not catch up in a burst
        await asyncio.gather(*tasks, return_exceptions=True)

    async def overload(self, n: int) -> None:
        """``n`` reviews at once on their own connections (no pool limit)."""
        connector = aiohttp.TCPConnector(limit=0)
        api = ApiServer(self.webhook_url, ca_file=str(self.ca))
        api._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=20))
        try:
            await asyncio.gather(*(self.submit(api, "overload") for _ in range(n)), return_exceptions=True)
        finally:
            await api._session.close()

    async def bad_reviews(self, n: int) -> None:
        assert self._api is not None
        good = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode()
        bodies = [
            b"{not json",
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\xff\xfe","object":{}}}',
            good,  # no request
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":' + b"[" * 5000 + b"]" * 5000 + b"}",
            b"x" * (8 << 20),  # above any sane body limit
        ]
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20))
        ssl_ctx = self._api._ssl
        try:

            async def one(i: int) -> None:
                hook = "validate" if i % 2 else "mutate"
                try:
                    async with session.post(
                        f"{self.webhook_url}/{hook}",
                        data=bodies[i % len(bodies)],
                        headers={"Content-Type": "application/json"},
                        ssl=ssl_ctx,
                    ) as resp:
                        await resp.read()
                        self.tally.bad_status[resp.status] += 1
                except (aiohttp.ClientError, OSError, TimeoutError):
                    self.tally.bad_status[0] += 1  # connection refused/reset: counted as 0

            await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await session.close()


# -- the run --------------------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    at: float  # time.time()
    detail: str = ""
    over_at: float = 0.0  # time.monotonic() when the injection ended (a burst sent, a node back)


@dataclass
class Run:
    args: argparse.Namespace
    root: Path
    nats: list[EmbeddedNats]
    world: Proc
    world_doc: dict[str, Any]
    webhook: Proc
    reconcilers: list[Proc]
    metrics_ports: list[int]
    webhook_port: int
    log_root: str
    nats_url: str
    rng: random.Random
    faults: list[Fault] = field(default_factory=list)
    failed_injections: Counter[str] = field(default_factory=Counter)
    # name -> (t, pid, kB, role): role "leader" or "standby" for a reconciler, "" for the webhook
    rss: dict[str, list[tuple[float, int, int, str]]] = field(default_factory=dict)

    async def leader(self, timeout_s: float = 30.0) -> int | None:
        """Index of the replica answering the API (the leader), or None."""
        end = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
            while time.monotonic() < end:
                for i, port in enumerate(self.metrics_ports):
                    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                        async with s.get(f"http://127.0.0.1:{port}/api/v1/queues") as resp:
                            if resp.status == 200:
                                return i
                await asyncio.sleep(0.5)
        return None

    async def webhook_ready(self, timeout_s: float = 60.0) -> bool:
        ca = self.root / "webhook" / "webhook-tls" / "ca.crt"
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if ca.exists():
                async with ApiServer(f"https://127.0.0.1:{self.webhook_port}", ca_file=str(ca)) as api:
                    if await api.ready():
                        return True
            await asyncio.sleep(0.3)
        return False

    async def control(self, path: str, *, tries: int = 3) -> None:
        """A call to the stand-ins' process, retried: on a loaded machine its event loop, busy
        serving four API servers, can miss a 30 s bound (silence and restore are idempotent)."""
        for attempt in range(1, tries + 1):
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s, s.post(
                    self.world_doc["control"] + path
                ) as resp:
                    resp.raise_for_status()
                    return
            except (aiohttp.ClientError, OSError, TimeoutError):
                if attempt == tries:
                    raise
                say("control", path, f"did not answer (try {attempt} of {tries}); again")

    async def inject(self, kind: str, load: Load) -> Fault:
        """Inject one fault; its time is the moment it struck (the kill, the stop, the silence,
        the first bad review), not when the search for its target began."""
        fault = Fault(kind, time.time())
        if kind == "leader_kill":
            i = await self.leader(timeout_s=20)
            if i is None:
                fault.detail = "no leader found to kill"
            else:
                fault.at = time.time()
                self.reconcilers[i].kill9()
                fault.detail = f"killed {self.reconcilers[i].name}"
                await asyncio.sleep(1.0)
                self.reconcilers[i].start()
        elif kind == "nats_restart":
            node = self.rng.randrange(len(self.nats))
            fault.at = time.time()
            await asyncio.to_thread(self.nats[node].stop)
            await asyncio.sleep(3.0)
            await asyncio.to_thread(self.nats[node].start)
            fault.detail = f"n{node}"
        elif kind == "worker_silent":
            name = self.rng.choice(sorted(self.world_doc["workers"]))
            await self.control(f"/silence/{name}")
            await asyncio.sleep(WORKER_LOST_S + 5.0)  # past the lost timeout: its jobs go elsewhere
            await self.control(f"/restore/{name}")
            fault.detail = name
        elif kind == "webhook_restart":
            await asyncio.to_thread(self.webhook.stop)
            self.webhook.start()
            ok = await self.webhook_ready()
            fault.detail = "ready again" if ok else "NOT ready within 60 s"
        elif kind == "bad_reviews":
            await load.bad_reviews(self.args.bad_burst)
            fault.detail = f"{self.args.bad_burst} reviews"
        elif kind == "overload":
            await load.overload(self.args.overload_burst)
            fault.detail = f"{self.args.overload_burst} at once"
        fault.over_at = time.monotonic()
        say("fault", kind, fault.detail)
        return fault

    async def leading(self) -> int | None:
        """One look (no waiting) at which replica answers the API, i.e. leads."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as s:
            for i, port in enumerate(self.metrics_ports):
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with s.get(f"http://127.0.0.1:{port}/api/v1/queues") as resp:
                        if resp.status == 200:
                            return i
        return None

    async def sample_rss(self) -> None:
        lead = await self.leading()
        now = time.monotonic()
        for p in (*self.reconcilers, self.webhook):
            kb = p.rss_kb()
            if kb is None or p.pid is None:
                continue
            role = ""
            if p in self.reconcilers:
                role = "leader" if lead is not None and self.reconcilers[lead] is p else "standby"
            self.rss.setdefault(p.name, []).append((now, p.pid, kb, role))


RAISING = ("overload", "bad_reviews")  # the bursts that lift a process's RSS to its plateau


def warmed_up_at(born: float, faults: list[Fault], *, warmup_s: float | None, settle_s: float) -> float:
    """When a process started at ``born`` (monotonic) has warmed up: ``warmup_s`` after its start
    if given, else once it has met each burst that lifts RSS to a plateau (an overload, a burst
    of bad reviews) and ``settle_s`` more. Python keeps what such a burst freed for reuse (it is
    not given back to the system), so the first of each is a step, not a leak; growth after it
    is. ``inf`` if it never met them."""
    if warmup_s is not None:
        return born + warmup_s
    ends = [min((f.over_at for f in faults if f.kind == kind and f.over_at > born), default=float("inf")) for kind in RAISING]
    return max(ends) + settle_s


def stretches(samples: list[tuple[float, int, int, str]]) -> list[list[tuple[float, int, int, str]]]:
    """Runs of samples of one instance doing one job throughout (leading, or standing by)."""
    runs: list[list[tuple[float, int, int, str]]] = []
    for sample in samples:
        if runs and runs[-1][-1][1] == sample[1] and runs[-1][-1][3] == sample[3]:
            runs[-1].append(sample)
        else:
            runs.append([sample])
    return runs


def rss_growth(
    samples: list[tuple[float, int, int, str]], *, half_at: float, warmed_up: Callable[[float], float]
) -> tuple[float | None, str]:
    """Growth over the last half of the run, after warm-up, of a process while it did the same
    job: the longest stretch of one instance that kept its role (a restart starts a new instance;
    a standby that takes over starts to lead, which takes memory once: the actuator's view, the
    status writer) with at least 10 samples there, the median of the last fifth of its samples
    against the median of the first fifth (RSS is a saw-tooth: single samples say little). The
    stretch's warm-up counts from its start. (None, why) if no stretch is long enough."""
    best: tuple[float, list[int], str] | None = None
    for run in stretches(samples):
        since = max(half_at, warmed_up(run[0][0]))
        window = [s[2] for s in run if s[0] >= since]
        if len(window) < 10:
            continue
        span = run[-1][0] - since
        if best is None or span > best[0]:
            role = f", {run[0][3]}" if run[0][3] else ""
            best = (span, window, f"over {span:.0f} s of pid {run[0][1]}{role}")
    if best is None:
        return None, "no instance kept its role through 10 samples of the last half after its warm-up"
    _, window, how = best
    fifth = len(window) // 5
    first, last = sorted(window[:fifth])[fifth // 2], sorted(window[-fifth:])[fifth // 2]
    return (last - first) / first, how


def plot_rss(run: Run, started: float, path: Path) -> None:
    """RSS of every process over the run, one line per instance, faults as ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    colors = {"webhook": "tab:green"}
    for name, samples in sorted(run.rss.items()):
        color = colors.get(name, "tab:blue" if name.endswith("0") else "tab:orange")
        for i, part in enumerate(stretches(samples)):
            xs = [(s[0] - started) / 60 for s in part]
            ys = [s[2] / 1024 for s in part]
            ax.plot(xs, ys, color=color, lw=1.6 if part[0][3] == "leader" else 0.9,
                    label=name if i == 0 else None)
    for f in run.faults:
        ax.axvline((f.over_at - started) / 60, color="0.85", lw=0.6, zorder=0)
    ax.set_xlabel("minutes (grey: a fault ends; thick: leading)")
    ax.set_ylabel("RSS, MB")
    ax.legend(loc="upper left")
    ax.set_title("soak: RSS of each process (a new line at each restart or change of role)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- checks -------------------------------------------------------------------------------------------


def submissions(entries: list[ev.LogEntry]) -> Counter[str]:
    return Counter(e.event.job.uid for e in entries if isinstance(e.event, ev.JobSubmitted))


def double_placements(entries: list[ev.LogEntry]) -> list[str]:
    """Jobs placed on a second cluster while the first placement was still open. A placement
    (Placed) is open until the core moves the job on: Requeued, Finished, Withdrawn or Evict of
    that attempt, or JobDeleted."""
    open_: dict[str, tuple[str, int]] = {}
    bad = []
    for e in entries:
        event = e.event
        job = getattr(event, "job", None)
        if not isinstance(job, ev.JobRef):
            continue
        key = job.key
        if isinstance(event, ev.Placed):
            held = open_.get(key)
            if held is not None and held[0] != event.cluster:
                bad.append(f"{key}: Placed on {event.cluster} (attempt {event.attempt}) at seq {e.seq} while placed on {held[0]} (attempt {held[1]})")
            open_[key] = (event.cluster, event.attempt)
        elif isinstance(event, ev.Requeued | ev.JobDeleted):
            open_.pop(key, None)
        elif isinstance(event, ev.Finished | ev.Withdrawn | ev.Evict):
            held = open_.get(key)
            if held is not None and held == (event.cluster, event.attempt):
                open_.pop(key, None)
    return bad


def fault_to_decision(faults: list[Fault], entries: list[ev.LogEntry]) -> list[tuple[Fault, float | None]]:
    decided = sorted(e.at_ms for e in entries if ev.is_decision(e.event))
    out: list[tuple[Fault, float | None]] = []
    import bisect

    for f in faults:
        i = bisect.bisect_left(decided, int(f.at * 1000))
        out.append((f, max(decided[i] - f.at * 1000, 0) / 1000 if i < len(decided) else None))
    return out


async def replay_verify(url: str, root: str, log_dir: Path, config: Path) -> tuple[bool, str]:
    proc = await asyncio.create_subprocess_exec(
        KDISPATCH, "replay", "--verify", "--quiet", "--config", str(config), "--nats", url, "--root", root,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    (log_dir / "replay-verify.txt").write_text(text)
    return proc.returncode == 0, text.strip().splitlines()[-1] if text.strip() else ""


# -- main ----------------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, root: Path) -> int:
    duration_s = args.minutes * 60
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    load_at_start = os.getloadavg()[0]
    say(f"soak: {args.minutes:g} min, {args.rate:g} jobs/s, a fault every {args.fault_every:g} s, seed {args.seed}, in {root} (kept unless it passes)")

    log_root = "soak" + uuid.uuid4().hex[:6]
    creds = Credentials(root).ensure(root=log_root)  # the users serve's embedded server would have
    nats = await asyncio.to_thread(lambda: three_nats(root, config_file=creds.server_conf))
    nats_url = ",".join(n.url for n in nats)
    world = Proc(
        "world",
        [sys.executable, str(REPO / "tests" / "soak" / "world.py"), "--dir", str(root), "--seed", str(args.seed),
         "--ttl-after-finished", str(args.ttl_after_finished)],
        logs,
    )
    world.start()
    procs: list[Proc] = [world]
    try:
        world_json = root / "world.json"
        for _ in range(600):
            if world_json.exists() or (world.proc is not None and world.proc.poll() is not None):
                break
            await asyncio.sleep(0.1)
        if not world_json.exists():
            raise SystemExit(f"soakworld did not start: see {logs}/world.1.log")
        world_doc = json.loads(world_json.read_text())
        config = write_config(
            root / "kdispatch.yaml", nats_url=nats_url, world=world_doc, data_dir=root / "scratch", creds=creds
        )
        metrics_ports = [free_port(), free_port()]
        reconcilers = [
            Proc(
                f"reconciler-{i}",
                [KDISPATCH, "serve", "--config", str(config), "--nats", nats_url, "--root", log_root,
                 "--metrics-port", str(port), "--leader-id", f"r{i}", "--log-level", args.log_level],
                logs,
            )
            for i, port in enumerate(metrics_ports)
        ]
        webhook_port = free_port()
        webhook = Proc(
            "webhook",
            [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(webhook_port), "--nats", nats_url,
             "--root", log_root, "--data-dir", str(root / "webhook"), "--config", str(config), "--log-level", "warning",
             "--nats-nkey", str(creds.seed_file("webhook"))],
            logs,
        )
        # One at a time: clients creating the same R3 streams at once can time out on a fresh cluster.
        reconcilers[0].start()
        procs += [reconcilers[0]]
        run = Run(args, root, nats, world, world_doc, webhook, reconcilers, metrics_ports, webhook_port, log_root, nats_url, rng)
        if await run.leader(timeout_s=90) is None:
            raise SystemExit(f"no leader within 90 s: see {logs}")
        reconcilers[1].start()
        webhook.start()
        procs += [reconcilers[1], webhook]
        if not await run.webhook_ready(timeout_s=90):
            raise SystemExit(f"webhook not ready within 90 s: see {logs}")
        say("up: nats x3 (authorization on, a user per component), world, reconciler x2, webhook")

        tally = Tally()
        ca = root / "webhook" / "webhook-tls" / "ca.crt"
        stop_load = asyncio.Event()
        started = time.monotonic()
        t0 = time.time()
        async with Load(f"https://127.0.0.1:{webhook_port}", ca, world_doc["control"], tally) as load:
            steady = asyncio.create_task(load.steady(args.rate, stop_load))

            async def sampler() -> None:
                while not stop_load.is_set():
                    await run.sample_rss()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop_load.wait(), args.rss_every)

            sampling = asyncio.create_task(sampler())
            order: list[str] = []
            next_fault = started + args.warmup
            last_fault_by = started + duration_s - args.quiet_end
            injecting: list[asyncio.Task[None]] = []

            async def inject(kind: str) -> None:
                try:
                    run.faults.append(await run.inject(kind, load))
                except Exception as err:  # the injection itself failed: say so, go on
                    say("fault", kind, "could not be injected:", repr(err))
                    run.failed_injections[kind] += 1

            # On the schedule, not one after the other: a long fault (a worker silent past its
            # lost timeout) overlaps the next ones, as faults do.
            while time.monotonic() < started + duration_s:
                if time.monotonic() >= next_fault and time.monotonic() < last_fault_by:
                    if not order:
                        order = list(KINDS)
                        rng.shuffle(order)
                    injecting.append(asyncio.create_task(inject(order.pop(0))))
                    next_fault += args.fault_every
                await asyncio.sleep(0.2)
            await asyncio.gather(*injecting)  # the load goes on until the last fault is over
            stop_load.set()
            await steady
            await sampling
        load_s = time.time() - t0
        say(f"load stopped: {tally.sent} reviews sent, {len(tally.accepted)} accepted; settling (up to {args.settle:g} s)")

        # Settle: every accepted job reaches the log (the webhook's, or the watcher's backfill).
        settle_start = time.monotonic()
        settled_in = None
        jlog = await connect(
            nats_url, replicas=3, root=log_root, nkey=creds.seed_file("reader"), inbox_prefix=inbox_prefix("reader"),
            create_streams=False,
        )
        try:
            seen: Counter[str] = Counter()
            entries: list[ev.LogEntry] = []
            while True:
                async for batch in jlog.reader.read(from_seq=len(entries) + 1):
                    entries.extend(batch)
                seen = submissions(entries)
                if all(seen[u] for u in tally.accepted):
                    settled_in = time.monotonic() - settle_start
                    break
                if time.monotonic() - settle_start > args.settle:
                    break
                await asyncio.sleep(1.0)
            await asyncio.sleep(2.0)  # anything appended just after (a late duplicate would show)
            async for batch in jlog.reader.read(from_seq=len(entries) + 1):
                entries.extend(batch)
        finally:
            await jlog.close()
        reading = reader_config(root / "reader.yaml", nats_url=nats_url, creds=creds)
        ok_replay, replay_line = await replay_verify(nats_url, log_root, logs, reading)
    finally:
        for p in reversed(procs):
            await asyncio.to_thread(p.stop)
        for node in nats:
            await asyncio.to_thread(node.stop)

    # -- figures and checks
    with (root / "log.jsonl").open("wb") as out:  # for a look afterwards (kept with the directory)
        for e in entries:
            out.write(msgspec.json.encode(e) + b"\n")
    with (root / "rss.jsonl").open("w") as rss_out:  # (seconds into the run, process, pid, kB, role)
        for name, samples in sorted(run.rss.items()):
            for t, pid, kb, role in samples:
                rss_out.write(json.dumps([round(t - started, 1), name, pid, kb, role]) + "\n")
    plot_rss(run, started, root / "rss.png")
    subs = submissions(entries)
    lost = [tally.accepted[u] for u in tally.accepted if subs[u] == 0]
    doubled = [u for u, n in subs.items() if n > 1]
    doubles = double_placements(entries)
    by_source = Counter(e.event.source for e in entries if isinstance(e.event, ev.JobSubmitted))
    half_at = started + duration_s / 2
    def warmed_up(born: float) -> float:
        return warmed_up_at(born, run.faults, warmup_s=args.rss_warmup, settle_s=args.rss_every * 2)

    judged = {name: rss_growth(s, half_at=half_at, warmed_up=warmed_up) for name, s in run.rss.items()}
    growth = {name: g for name, (g, _) in judged.items()}
    fault_delays = fault_to_decision(run.faults, entries)
    finished = sum(1 for e in entries if isinstance(e.event, ev.Finished))
    held = len(tally.accepted) / load_s

    say("--- figures")
    print(f"duration            {load_s:.0f} s of load, {len(entries)} log entries")
    print(
        f"machine             {os.cpu_count()} cores; load average {load_at_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (other work on the machine slows every process here)"
    )
    types = Counter(type(e.event).__name__ for e in entries)
    print(f"log by type         {dict(types.most_common())}")
    requeued = Counter(e.event.reason for e in entries if isinstance(e.event, ev.Requeued))
    print(f"requeued by reason  {dict(requeued.most_common())}")
    print(f"load held           {held:.2f} jobs/s accepted (asked {args.rate:g}/s steady + bursts); {finished} finished")
    print(f"reviews             {tally.sent} sent, {len(tally.accepted)} accepted, refused/failed: {dict(tally.errors) or 0}")
    print(f"submissions         by source {dict(by_source)}; backfill settled in {settled_in if settled_in is None else round(settled_in, 1)} s")
    five = sum(n for code, n in tally.bad_status.items() if code >= 500)
    print(
        f"bad reviews         answers by HTTP status {dict(sorted(tally.bad_status.items()))} (0: connection closed)"
        + (f"; {five} answered 5xx where the documented answer is 400 with the reason" if five else "")
    )
    kinds = Counter(f.kind for f in run.faults)
    print(f"faults survived     {len(run.faults)}: {dict(sorted(kinds.items()))}")
    worst: tuple[Fault, float] | None = None
    for f, d in fault_delays:
        print(f"  {f.kind:16s} {f.detail:28s} next decision after {'never' if d is None else f'{d:.1f} s'}")
        if d is not None and (worst is None or d > worst[1]):
            worst = (f, d)
    for name, (g, how) in sorted(judged.items()):
        s = run.rss.get(name, [])
        print(
            f"rss {name:15s} {s[-1][2] // 1024 if s else 0} MB at the end, peak {max(x[2] for x in s) // 1024 if s else 0} MB; "
            f"last-half growth after warm-up {'n/a' if g is None else f'{g * 100:+.1f}%'} ({how})"
        )
    print(f"rss samples         {root / 'rss.jsonl'}, drawn in {root / 'rss.png'}")
    print(f"replay --verify     {'ok' if ok_replay else 'FAILED'}: {replay_line}")

    failures = []
    if lost:
        failures.append(f"{len(lost)} accepted jobs not in the log (e.g. {lost[:3]})")
    if doubled:
        failures.append(f"{len(doubled)} jobs submitted more than once in the log (e.g. {doubled[:3]})")
    if doubles:
        failures.append(f"{len(doubles)} double placements (e.g. {doubles[:2]})")
    if not ok_replay:
        failures.append("replay --verify failed")
    for name, g in growth.items():
        if g is not None and g >= args.rss_growth:
            failures.append(f"{name} RSS grew {g * 100:.1f}% over the last half (limit {args.rss_growth * 100:.0f}%)")
    missing = sorted(set(KINDS) - {f.kind for f in run.faults})
    if missing and len(run.faults) + sum(run.failed_injections.values()) >= len(KINDS):
        # a schedule with room for every kind that left one out: a gap in what the run proves
        failures.append(f"fault kinds never injected: {missing}")
    if run.failed_injections:  # the harness missed one (a starved stand-in process), not the system
        print(f"NOTE faults that could not be injected (the harness, counted apart): {dict(run.failed_injections)}")
    if any(d is None for _, d in fault_delays):
        failures.append("a fault was never followed by a decision")
    for failure in failures:
        print("FAIL", failure)
    worst_text = f"{worst[1]:.1f} s ({worst[0].kind})" if worst else "n/a"
    verdict = "PASS" if not failures else f"FAIL ({len(failures)})"
    print(
        f"soak {verdict}: {load_s / 60:.1f} min, {held:.1f} jobs/s held, {len(run.faults)} faults survived, "
        f"worst fault->decision {worst_text}, {len(tally.accepted)} accepted / {len(lost)} lost / {len(doubled)} doubled, "
        f"{len(doubles)} double placements, replay --verify {'ok' if ok_replay else 'FAILED'}"
        + (f", {sum(run.failed_injections.values())} faults not injected" if run.failed_injections else "")
    )
    return 0 if not failures else 1


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    p.add_argument("--rate", type=float, default=10.0, help="steady submissions per second (default 10)")
    p.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    p.add_argument("--fault-every", type=float, default=20.0, help="seconds between faults (default 20)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds before the first fault")
    p.add_argument("--quiet-end", type=float, default=15.0, help="no fault in the last seconds of the load")
    p.add_argument("--bad-burst", type=int, default=200, help="malformed reviews per bad_reviews fault")
    p.add_argument("--overload-burst", type=int, default=400, help="concurrent reviews per overload fault")
    p.add_argument("--settle", type=float, default=120.0, help="bound on the wait for backfill at the end")
    p.add_argument("--rss-every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--rss-growth", type=float, default=0.05, help="limit on last-half RSS growth (0.05 = 5%%)")
    p.add_argument(
        "--rss-warmup", type=float, default=None,
        help="seconds after a process starts before its RSS is judged (default: once it met an overload and a bad-review burst)",
    )
    p.add_argument(
        "--ttl-after-finished", type=float, default=60.0,
        help="the manager deletes a completed job this long after (as Kubernetes' TTL controller; 0: keeps all)",
    )
    p.add_argument("--log-level", default="warning", help="the reconcilers' log level (their logs are under DIR/logs)")
    p.add_argument("--dir", help="work directory (kept); default a temporary one, removed on success")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.dir:
        root = Path(args.dir)
        root.mkdir(parents=True, exist_ok=True)
        return asyncio.run(soak(args, root))
    root = Path(tempfile.mkdtemp(prefix="kd-soak-"))
    code = asyncio.run(soak(args, root))
    if code == 0 and not os.environ.get("KD_SOAK_KEEP"):
        shutil.rmtree(root, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
