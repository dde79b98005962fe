"""Fleet scale: a million pending jobs, 5,000 clusters, 100 ClusterQueues in 10 cohorts, one log.

    .venv/bin/python bench/fleet.py [--jobs 1000000] [--clusters 5000] [--tail 20000] [--webhook-rate 1000]

On a real nats-server (embedded, file store):

1. Build. The log is written through the sequencer API (``JetStreamLog.sequencer``, fenced appends
   as the leader makes them), not through the inbox and HTTP: the queue configuration, the
   clusters, then the jobs in batches, each batch folded and decided by the real core and its
   decisions appended, exactly as the leader loop does. Quota is tight, so almost every job stays
   pending (decided ``Unschedulable``, waiting for quota in its ClusterQueue). A snapshot is taken
   as the leader takes it, then ``--tail`` more jobs are appended after it: what a standby must fold.
2. Decide while deep: rounds of 10 new jobs and one deletion of a placed job (which frees quota:
   the next job of that queue is nominated out of the deep queue), each decided; p50/p99 of one
   ``decide`` (the core's time; the sizing floor is 50 ms).
3. Fail-over. Two candidate processes (``--role candidate``: ``run_candidate`` + ``LeaderLoop``, as
   ``kdispatch serve --no-actuator`` runs them) on the log; the first leads, the second is the
   standby (warm: it restores the latest snapshot and follows the log while it waits). The leader is
   killed (SIGKILL: no lease release, the standby waits out the lease TTL), a job is submitted to the
   inbox at once, and the time is taken until the standby's decision on it is in the log. RSS of
   both processes is read from /proc.
4. Webhook. ``python -m webhook`` at a fixed ``--webhook-rate`` of reviews/s over TLS, p99 from an
   open-loop client (bench/webhook.py's), first on an empty log before the build (the baseline),
   then on the fleet log while the new leader sequences and decides what it records.

The last line is the headline. On a loaded machine every wall-clock figure is pessimistic; the
build's duration is printed so a run can be sized (``--jobs 100000`` takes a few minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # before bench/: ``webhook`` is the package

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats, _die_with_parent, free_port
from eventlog.jetstream import JetStreamLog, connect
from eventlog.store import InboxItem
from reconciler import core
from reconciler.core import phases
from reconciler.edge import gcpolicy
from reconciler.edge.logging import configure
from reconciler.edge.percentile import percentile
from reconciler.edge.plugins import installed
from reconciler.history.rebuild import Snapshot, encode_snapshot

ROOT = Path(__file__).resolve().parents[1]
GPU = "nvidia.com/gpu"
REGIONS = ["eu-west", "eu-central", "us-east", "us-west", "ap-south"]
GPUS = ["a100", "h100", "l4"]
POLICY = ev.PolicyLoaded(
    profiles=[
        ev.Profile(
            name="default",
            filters=[ev.FilterSpec(name=n) for n in ("ClusterHealth", "ClusterSelector", "ClusterTaints", "ClusterFeasibility")],
            scores=[ev.ScoreSpec(name="CapacityScore")],
            strategy=ev.StrategySpec(type="TopK", k=1),
        )
    ],
    worker_lost_timeout_ms=24 * 3_600_000,  # the bench's clusters send no heartbeats after registering
)
DECIDE_P99_FLOOR_MS = 50.0
FAILOVER_FLOOR_S = 10.0
RSS_FLOOR_MB = 2048.0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def rss_mb(pid: int | None = None) -> tuple[float, float]:
    """(RSS, peak RSS) in MB of a process (this one by default), from /proc."""
    text = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    fields = {line.split(":")[0]: line.split()[1] for line in text.splitlines() if line.startswith(("VmRSS", "VmHWM"))}
    return int(fields["VmRSS"]) / 1024, int(fields["VmHWM"]) / 1024


# ---- the fleet ------------------------------------------------------------------------------


def queues_config(n_queues: int, n_cohorts: int) -> ev.QueuesConfigured:
    """``n_queues`` ClusterQueues in ``n_cohorts`` cohorts, quota tight enough that the fleet's jobs
    queue: 100 CPUs and 8 GPUs nominal each, GPUs borrowable up to 8 more through the cohort."""

    def quota(cpu: int, gpu: int) -> list[ev.ResourceGroup]:
        return [
            ev.ResourceGroup(
                covered_resources=["cpu", "memory", GPU],
                flavors=[
                    ev.FlavorQuotas(
                        name="default",
                        resources=[
                            ev.ResourceQuota(name="cpu", nominal=cpu),
                            ev.ResourceQuota(name="memory", nominal=1 << 40),
                            ev.ResourceQuota(name=GPU, nominal=gpu, borrowing_limit=gpu),
                        ],
                    )
                ],
            )
        ]

    return ev.QueuesConfigured(
        cluster_queues=[
            ev.ClusterQueueSpec(
                name=f"team-{i:03}",
                cohort=f"cohort-{i % n_cohorts:02}",
                namespace_selector=ev.LabelSelector(),
                resource_groups=quota(100_000, 8),
                weight_milli=1000 + 250 * (i % 4),
            )
            for i in range(n_queues)
        ],
        source="bench/fleet.py",
    )


def make_clusters(n: int, rng: random.Random) -> list[ev.ClusterRegistered]:
    out = []
    for i in range(n):
        gpu = rng.choice([*GPUS, "none", "none"])
        taints = [ev.Taint(key=GPU, value=gpu, effect="NoSchedule")] if gpu != "none" else []
        capacity = {"cpu": rng.choice([64, 128, 256]) * 1000, "memory": rng.choice([256, 512]) << 30}
        if gpu != "none":
            capacity[GPU] = rng.choice([8, 16, 32])
        labels = {"topology.kubernetes.io/region": rng.choice(REGIONS), "gpu": gpu}
        out.append(ev.ClusterRegistered(cluster=f"cluster-{i:05}", labels=labels, taints=taints, capacity=capacity))
    return out


def make_job(i: int, rng: random.Random, n_queues: int, *, prefix: str = "job") -> ev.JobSubmitted:
    """A batch job as the webhook records it (its manifest left out: the fold does not keep it):
    one pod set, CPU and memory, a third with a GPU (and its toleration), half pinned to a region."""
    requests = {"cpu": rng.choice([500, 1000, 2000]), "memory": rng.choice([1, 2, 4]) << 30}
    selector: dict[str, str] = {}
    tolerations: list[ev.Toleration] = []
    if i % 3 == 0:
        gpu = rng.choice(GPUS)
        requests[GPU] = 1
        selector["gpu"] = gpu
        tolerations.append(ev.Toleration(key=GPU, operator="Equal", value=gpu, effect="NoSchedule"))
    if rng.random() < 0.5:
        selector["topology.kubernetes.io/region"] = rng.choice(REGIONS)
    queue = f"team-{i % n_queues:03}"
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=queue, name=f"{prefix}-{i:07}", uid=f"{prefix}-uid-{i}"),
        pod_sets=[ev.PodSet(name="main", count=rng.choice([1, 1, 2, 4]), requests=requests)],
        placement=ev.Placement(cluster_selector=selector, cluster_tolerations=tolerations),
        queue="user-queue",
        cluster_queue=queue,
    )


class Builder:
    """The leader loop without the inbox: append inputs, fold, decide, append decisions, fold."""

    def __init__(self, jlog: JetStreamLog) -> None:
        self.jlog = jlog
        self.seqr = jlog.sequencer("builder")
        self.state = core.new_state(plugins=installed().registry)
        self.last_at_ms = 0
        self.decide_s: list[float] = []
        self.decisions: dict[str, int] = {}
        self.policy: ev.PolicyLoaded | None = None
        self.queues: ev.QueuesConfigured | None = None
        self.since_settle = 0  # entries since the state was last frozen (``gcpolicy``)

    async def step(self, inputs: list[ev.InputEvent]) -> list[ev.DecisionEvent]:
        at_ms = self.last_at_ms = max(wall_ms(), self.last_at_ms)
        entries = await self.seqr.append_inputs([InboxItem(inbox_seq=None, event=e) for e in inputs], at_ms=at_ms)
        for entry in entries:
            self.state = core.fold(self.state, entry)
            if isinstance(entry.event, ev.PolicyLoaded):
                self.policy = entry.event
            elif isinstance(entry.event, ev.QueuesConfigured):
                self.queues = entry.event
        started = time.perf_counter()
        decisions = core.decide(self.state)
        self.decide_s.append(time.perf_counter() - started)
        if decisions:
            for entry in await self.seqr.append_decisions(decisions, at_ms=at_ms):
                self.state = core.fold(self.state, entry)
            for d in decisions:
                self.decisions[type(d).__name__] = self.decisions.get(type(d).__name__, 0) + 1
        # The leader settles at each snapshot, one every max(--snapshot-every, live jobs) entries;
        # the Builder stores only one, but its collector runs on the same rhythm.
        self.since_settle += len(inputs) + len(decisions)
        if gcpolicy.due(self.since_settle, len(self.state.jobs)):
            gcpolicy.settle()
            self.since_settle = 0
        return decisions

    async def step_and_admit(self, inputs: list[ev.InputEvent]) -> None:
        """``step``, then the workers' answers to its nominations (created and admitted at once,
        as an idle worker with room answers): the jobs are Placed, not withdrawn at their deadline."""
        decisions = await self.step(inputs)
        while True:
            acks: list[ev.InputEvent] = []
            for d in decisions:
                if isinstance(d, ev.Nominated):
                    cluster = d.clusters[0]
                    acks.append(ev.RemoteCreated(job=d.job, cluster=cluster, attempt=d.attempt))
                    acks.append(ev.RemoteAdmitted(job=d.job, cluster=cluster, attempt=d.attempt))
            if not acks:
                return
            decisions = await self.step(acks)

    async def snapshot(self) -> int:
        data = encode_snapshot(
            Snapshot(
                seq=self.seqr.last_seq,
                at_ms=self.last_at_ms,
                state=core.dump_state(self.state),
                policy=self.policy,
                queues=self.queues,
            )
        )
        gcpolicy.settle()  # as the leader loop does after each snapshot: what joined the state is frozen
        self.since_settle = 0
        await self.jlog.snapshots.save(self.seqr.last_seq, data)
        return len(data)


def show(line: str) -> None:
    print(line, flush=True)


async def build(jlog: JetStreamLog, args: argparse.Namespace) -> tuple[Builder, dict[str, Any]]:
    rng = random.Random(16)
    b = Builder(jlog)
    await b.seqr.resume()
    started = time.perf_counter()
    await b.step_and_admit([POLICY, queues_config(args.queues, args.cohorts)])
    clusters = make_clusters(args.clusters, rng)
    for i in range(0, len(clusters), 1000):
        await b.step_and_admit(list(clusters[i : i + 1000]))
    main_jobs = args.jobs - args.tail
    # Batch bounds, one of them at the snapshot (so the snapshot falls at a batch boundary).
    bounds = sorted({*range(0, args.jobs, args.batch), main_jobs, args.jobs})
    shown = time.perf_counter()
    snap_seq = snap_bytes = 0
    for start, end in itertools.pairwise(bounds):
        await b.step_and_admit([make_job(j, rng, args.queues) for j in range(start, end)])
        if end == main_jobs:
            snap_bytes = await b.snapshot()
            snap_seq = b.seqr.last_seq
            show(f"  snapshot at log entry {snap_seq:,}: {snap_bytes / 1e6:,.1f} MB")
        if time.perf_counter() - shown > 10 or end == args.jobs:
            shown = time.perf_counter()
            el = shown - started
            show(
                f"  built {end:,}/{args.jobs:,} jobs, log {b.seqr.last_seq:,} entries, {el:,.0f} s "
                f"({end / el:,.0f} jobs/s), RSS {rss_mb()[0]:,.0f} MB"
            )
    info = {"seconds": time.perf_counter() - started, "snapshot_seq": snap_seq, "snapshot_bytes": snap_bytes}
    return b, info


async def decide_rounds(b: Builder, args: argparse.Namespace) -> list[float]:
    """Rounds of 10 submissions and one deletion of a placed job; the core's decide time each."""
    rng = random.Random(99)
    nominated = [key for key, job in b.state.jobs.items() if job.phase == phases.PLACED]
    rng.shuffle(nominated)
    times: list[float] = []
    deadline = time.monotonic() + args.rounds_budget
    for r in range(args.rounds):
        if times and time.monotonic() > deadline:
            show(f"  stopped after {len(times)} rounds (--rounds-budget {args.rounds_budget:g} s)")
            break
        inputs: list[ev.InputEvent] = [make_job(args.jobs + r * 10 + k, rng, args.queues, prefix="more") for k in range(10)]
        if nominated:
            ref = b.state.jobs[nominated.pop()].ref
            inputs.append(ev.JobDeleted(job=ref))
        b.decide_s.clear()
        await b.step_and_admit(inputs)
        times.append(b.decide_s[0])
    return times


# ---- the candidates (each its own process) -----------------------------------------------------


async def candidate(args: argparse.Namespace) -> None:
    from reconciler.service.leader import run_candidate
    from reconciler.service.loop import LeaderLoop, LoopSettings

    configure(level="info")  # the standby says when it is warm (standby_warm)
    jlog = await connect(args.nats, root=args.root)
    loop = LeaderLoop(jlog, LoopSettings(leader_id=args.id, snapshot_every=args.snapshot_every))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    term = asyncio.create_task(run_candidate(jlog, loop, stop=stop, ttl_s=args.ttl, warm=not args.cold))
    show(f"CANDIDATE {args.id} {time.time():.3f}")
    waiter = asyncio.create_task(loop.ready.wait())
    await asyncio.wait({term, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if loop.ready.is_set():
        rss, peak = rss_mb()
        show(f"READY {args.id} at={time.time():.3f} rss={rss:.0f} peak={peak:.0f} snapshot={loop.snapshot_seq} last={loop.last_seq}")
    await term
    await jlog.close()


def spawn_candidate(args: argparse.Namespace, url: str, ident: str, out: Path, *, warm: bool) -> subprocess.Popen[bytes]:
    argv = [sys.executable, __file__, "--role", "candidate", "--nats", url, "--root", args.root, "--id", ident, "--ttl", str(args.ttl)]
    return subprocess.Popen(
        [*argv, *([] if warm else ["--cold"])],
        stdout=out.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        preexec_fn=_die_with_parent,  # a bench killed half-way leaves no leader behind
    )


def wait_line(path: Path, prefix: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(prefix) or (prefix.islower() and prefix in line):
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{path.name}: exited {proc.returncode}:\n{path.read_text()[-3000:]}")
        time.sleep(0.05)
    raise TimeoutError(f"no {prefix!r} in {path} after {timeout_s:.0f} s:\n{path.read_text()[-3000:]}")


class Candidates:
    """The candidate processes of the run, by name."""

    def __init__(self, args: argparse.Namespace, url: str, workdir: Path) -> None:
        self.args, self.url, self.workdir = args, url, workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.spawned: dict[str, float] = {}

    def started(self, ident: str) -> float:
        return self.spawned[ident]

    def out(self, ident: str) -> Path:
        return self.workdir / f"candidate-{ident}.out"

    def spawn(self, ident: str, *, warm: bool) -> subprocess.Popen[bytes]:
        self.spawned[ident] = time.time()
        self.procs[ident] = spawn_candidate(self.args, self.url, ident, self.out(ident), warm=warm)
        return self.procs[ident]

    async def wait(self, ident: str, prefix: str, timeout_s: float) -> str:
        return await asyncio.to_thread(wait_line, self.out(ident), prefix, self.procs[ident], timeout_s)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def takeover(jlog: JetStreamLog, cands: Candidates, *, leader: str, standby: str, warm: bool) -> dict[str, Any]:
    """``standby`` (warm or cold) waits behind ``leader``; SIGKILL the leader, submit a job, and
    time until the standby's decision on it is in the log."""
    args = cands.args
    proc = cands.spawn(standby, warm=warm)
    await cands.wait(standby, "CANDIDATE", 60)
    if warm:
        await cands.wait(standby, "standby_warm", args.ready_timeout)
    await asyncio.sleep(args.standby_settle)  # the leader decides on; a warm standby follows
    standby_rss = rss_mb(proc.pid)
    seen: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    probe = make_job(10**8, random.Random(1), args.queues, prefix=f"probe-{standby}")

    async def on_entry(msg: Any) -> None:
        entry = codec.decode_entry(msg.data)
        ours = entry.leader == standby and ev.is_decision(entry.event)
        if ours and getattr(entry.event, "job", None) == probe.job and not seen.done():
            seen.set_result(time.perf_counter())

    sub = await jlog.nc.subscribe(f"{jlog.names.log_prefix}.>", cb=on_entry)
    killed, killed_wall = time.perf_counter(), time.time()
    cands.procs[leader].send_signal(signal.SIGKILL)
    cands.procs[leader].wait()
    await jlog.inbox.publish(probe, msg_id=f"probe-{standby}")
    try:
        decided_at = await asyncio.wait_for(seen, timeout=args.ready_timeout if warm else args.cold_timeout)
    except TimeoutError:
        # A cold standby rebuilds while holding the lease: at fleet size the rebuild outlasts
        # the lease's renewals, and it loses the lease again and again.
        lost = cands.out(standby).read_text(errors="replace").count('"lease_lost"')
        show(f"  {standby} made no decision within {args.cold_timeout:g} s of the kill; it lost the lease {lost} times")
        return {"seconds": float("inf"), "ready_s": float("inf"), "ready": {"snapshot": "-", "last": "-"},
                "standby_rss": standby_rss, "rss_after": rss_mb(proc.pid)}
    finally:
        await sub.unsubscribe()
    ready = parse_ready(await cands.wait(standby, "READY", 60))
    return {
        "seconds": decided_at - killed,
        "ready_s": float(ready["at"]) - killed_wall,
        "ready": ready,
        "standby_rss": standby_rss,
        "rss_after": rss_mb(proc.pid),
    }


def parse_ready(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


# ---- the webhook ------------------------------------------------------------------------------


class Webhook:
    """``python -m webhook`` on one log root, driven by bench/webhook.py's open-loop client."""

    def __init__(self, url: str, root: str, workdir: Path) -> None:
        spec = importlib.util.spec_from_file_location("bench_webhook", Path(__file__).parent / "webhook.py")
        assert spec is not None and spec.loader is not None
        wb = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(wb)  # bench/webhook.py: its TLS bodies, readiness wait and rate client
        self.wb = wb
        self.workdir = workdir / f"webhook-{root}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        out = (self.workdir / "webhook.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(self.port), "--nats", url,
             "--data-dir", str(self.workdir / "data"), "--root", root],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        self.ca = str(self.workdir / "data" / "webhook-tls" / "ca.crt")
        deadline = time.monotonic() + 60
        while not Path(self.ca).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.url = f"https://127.0.0.1:{self.port}"
        wb._wait_ready(url=self.url, ca=self.ca, proc=self.proc, log=self.workdir / "webhook.log")
        _, self.validate_body = wb._bodies(self.workdir)

    def p99(self, rate: float, seconds: float) -> tuple[float, float, int]:
        fixed = self.wb._rate(url=self.url + "/validate", body=self.validate_body, ca=self.ca, rate=rate, seconds=seconds)
        lat = fixed["latencies_ms"]
        return float(percentile(lat, 50) or 0.0), float(percentile(lat, 99) or 0.0), int(fixed["errors"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---- main -------------------------------------------------------------------------------------


async def drive(args: argparse.Namespace) -> int:
    configure(level="warning")
    gcpolicy.at_start()  # the Builder is the leader: the collector as `kdispatch serve` runs it
    tmp = tempfile.mkdtemp(prefix="kd-bench-fleet-", dir=args.tmp)
    workdir = Path(tmp)
    server = EmbeddedNats(data_dir=workdir / "nats")
    await server.start_async()
    cands: Candidates | None = None
    try:
        show(
            f"fleet: {args.jobs:,} jobs ({args.tail:,} after the snapshot), {args.clusters:,} clusters, "
            f"{args.queues} ClusterQueues in {args.cohorts} cohorts; nats-server {server.url}, store {workdir}"
        )
        base_hook: tuple[float, float, int] | None = None
        if args.webhook_rate:
            empty = await connect(server.url, root="empty")
            await empty.close()
            hook = Webhook(server.url, "empty", workdir)
            try:
                base_hook = hook.p99(args.webhook_rate, args.webhook_seconds)
            finally:
                hook.stop()
            show(f"webhook on an empty log at {args.webhook_rate:.0f}/s: p50 {base_hook[0]:.2f} ms, p99 {base_hook[1]:.2f} ms")
        jlog = await connect(server.url, root=args.root)
        show("== build (sequencer API: append, fold, decide, append decisions)")
        b, built = await build(jlog, args)
        pending = sum(1 for j in b.state.jobs.values() if j.phase in (phases.QUEUED, phases.UNSCHEDULABLE))
        build_decide = sorted(b.decide_s)
        build_p50 = percentile(build_decide, 50) or 0.0
        show(
            f"built in {built['seconds']:,.0f} s: log {b.seqr.last_seq:,} entries, {pending:,} jobs pending, "
            f"decisions {b.decisions}; builder RSS {rss_mb()[0]:,.0f} MB"
        )
        show(f"== decide while the queue is deep (gc: {gcpolicy.NAME})")
        times = await decide_rounds(b, args)
        p50, p99 = percentile(times, 50) or 0.0, percentile(times, 99) or 0.0
        show(f"{len(times)} rounds (10 submissions + 1 deletion each, each round's first decide): p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
             f"max {max(times) * 1000:.1f} ms; build batches of {args.batch}: p50 {build_p50 * 1000:.0f} ms")
        state_rss = rss_mb()[0]
        del b
        show("== fail-over (SIGKILL the leader; the standby's first decision on a new job)")
        cands = Candidates(args, server.url, workdir)
        cands.spawn("a", warm=True)
        ready_a = parse_ready(await cands.wait("a", "READY", args.ready_timeout))
        rss_leader = float(ready_a["peak"])
        show(
            f"leader a: restored snapshot {ready_a['snapshot']} and folded to {ready_a['last']} "
            f"in {float(ready_a['at']) - cands.started('a'):.1f} s; RSS {ready_a['rss']} MB (peak {ready_a['peak']} MB)"
        )
        runs: dict[str, dict[str, Any]] = {}
        order = [("a", "b", True)] + ([("b", "c", False)] if args.cold_failover else [])
        for leader, standby, warm in order:
            fo = runs["warm" if warm else "cold"] = await takeover(jlog, cands, leader=leader, standby=standby, warm=warm)
            rss_leader = max(rss_leader, fo["rss_after"][1])
            show(
                f"{'warm' if warm else 'cold'} standby {standby} (RSS {fo['standby_rss'][0]:,.0f} MB before): "
                f"leading {fo['ready_s']:.2f} s after SIGKILL of {leader}, its decision on a new job at "
                f"{fo['seconds']:.2f} s (lease TTL {args.ttl:g} s); from snapshot {fo['ready']['snapshot']} to "
                f"{fo['ready']['last']}; RSS {fo['rss_after'][0]:,.0f} MB, peak {fo['rss_after'][1]:,.0f} MB"
            )
        fo = runs["warm"]
        hook_fleet: tuple[float, float, int] | None = None
        if args.webhook_rate:
            hook = Webhook(server.url, args.root, workdir)
            try:
                hook_fleet = hook.p99(args.webhook_rate, args.webhook_seconds)
            finally:
                hook.stop()
            show(
                f"webhook on the fleet log at {args.webhook_rate:.0f}/s (leader b sequencing and deciding): "
                f"p50 {hook_fleet[0]:.2f} ms, p99 {hook_fleet[1]:.2f} ms, errors {hook_fleet[2]}"
            )
        await jlog.close()
        show(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        ok = fo["seconds"] < FAILOVER_FLOOR_S and p99 * 1000 < DECIDE_P99_FLOOR_MS and rss_leader < RSS_FLOOR_MB
        hook_txt = ""
        if base_hook and hook_fleet:
            hook_txt = f", webhook p99 {hook_fleet[1]:.2f} ms vs {base_hook[1]:.2f} ms on an empty log ({hook_fleet[1] / base_hook[1]:.2f}x)"
        show(
            f"HEADLINE fleet {args.jobs:,} jobs ({pending:,} pending) / {args.clusters:,} clusters / {args.queues} queues: "
            f"fail-over {fo['seconds']:.2f} s"
            + (f" (cold standby {runs['cold']['seconds']:.2f} s)" if "cold" in runs else "")
            + f", decide p99 {p99 * 1000:.1f} ms, leader RSS peak {rss_leader:,.0f} MB "
            f"(bench process with the same state {state_rss:,.0f} MB){hook_txt}"
            + ("" if ok else " [FLOORS MISSED]")
        )
        return 0 if ok else 1
    finally:
        if cands is not None:
            cands.stop_all()
        await server.stop_async()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=5_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--tail", type=int, default=20_000, help="jobs appended after the snapshot")
    parser.add_argument("--batch", type=int, default=2_000, help="jobs per sequenced batch while building")
    parser.add_argument("--rounds", type=int, default=50, help="decide rounds while the queue is deep")
    parser.add_argument("--rounds-budget", type=float, default=120.0, help="seconds for the decide rounds (at least one)")
    parser.add_argument("--ttl", type=float, default=5.0, help="lease TTL of the candidates (serve --lease-ttl)")
    parser.add_argument("--standby-settle", type=float, default=5.0, help="seconds the standby runs before the kill")
    parser.add_argument("--no-cold-failover", dest="cold_failover", action="store_false",
                        help="skip the second fail-over, to a cold standby (restores the snapshot at take-over)")
    parser.add_argument("--cold-timeout", type=float, default=90.0, help="seconds a cold standby gets to decide")
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--webhook-rate", type=float, default=1000.0, help="reviews/s (0: skip the webhook)")
    parser.add_argument("--webhook-seconds", type=float, default=10.0)
    parser.add_argument("--tmp", help="where the nats store goes (default: the system's temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the store")
    parser.add_argument("--root", default="fleet")
    # the candidate role (a child process)
    parser.add_argument("--role", choices=["bench", "candidate"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--nats", help=argparse.SUPPRESS)
    parser.add_argument("--id", help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--snapshot-every", type=int, default=10**9, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "bench" and args.jobs < 2:
        parser.error(f"--jobs must be at least 2 (half may follow the snapshot), got {args.jobs}")
    if args.role == "candidate":
        asyncio.run(candidate(args))
        return 0
    args.tail = min(args.tail, args.jobs // 2)
    return asyncio.run(drive(args))


if __name__ == "__main__":
    sys.exit(main())
