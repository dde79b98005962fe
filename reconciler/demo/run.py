"""``kdispatch demo``: the whole system on one machine, end to end, checking itself.

Composition (all real, nothing mocked): the embedded nats-server (the log), the webhook over
HTTPS as a child process (``python -m webhook``), the leader loop, the actuator, four simulated
worker clusters in real time, and the demo itself playing the kube-apiserver: it sends
AdmissionReviews for ~200 jobs of four kinds. The script: long low-priority GPU "fillers" first,
then a steady stream; midway one cluster goes silent (Lost after the shortened worker-lost
timeout, its jobs requeued elsewhere) and a burst of high-priority GPU jobs has to preempt.

The demo fails (exit 1) if any job does not reach a final state, if ``replay --verify``
disagrees with the log, or if the scenario did not happen (no re-placement, no preemption).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shlex
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventlog import events as ev
from eventlog.embedded import free_port
from reconciler import core
from reconciler.demo import setup
from reconciler.demo.apiserver import AdmissionFailed, ApiServer
from reconciler.demo.follower import LogFollower
from reconciler.demo.view import FINAL_PHASES, Screen, class_table, cluster_table, next_steps, progress_status
from reconciler.demo.workload import DemoJob, Pace, burst_jobs, filler_jobs, long_cpu_jobs, main_jobs
from reconciler.edge import logging as klog
from reconciler.edge.logsource import URL_FILE
from reconciler.edge.percentile import percentile
from reconciler.edge.plugins import installed
from reconciler.history.replay import replay
from reconciler.policy import policy_event
from reconciler.service.child import Supervised
from reconciler.service.clusters.simulated import SimCluster
from reconciler.service.loop import LeaderLoop, LoopSettings
from reconciler.service.metrics import ReconcilerMetrics
from reconciler.service.wiring import Settings, System, build
from reconciler.simulate.metrics import seconds
from reconciler.simulate.recorder import Recorder

MARKER = "demo-config.yaml"


class DemoError(RuntimeError):
    """The demo could not run at all (data dir in use, webhook never ready...)."""


@dataclass(frozen=True)
class Options:
    jobs: int = 200
    data_dir: Path = Path(".kdispatch")
    fast: bool = False
    seed: int = 7
    quiet: bool = False
    queues: ev.QueuesConfigured | None = None  # --queues, loaded (recorded by the leader, read by the webhook)
    queues_path: Path | None = None
    hold: bool = False  # keep the final state and the web page up until Ctrl-C

    @property
    def window_s(self) -> float:
        """How long the steady stream of submissions lasts."""
        return 8.0 if self.fast else 40.0

    @property
    def silence_s(self) -> float:
        return 6.0 if self.fast else 15.0

    @property
    def timeout_s(self) -> float:
        """Longest wait for every job to reach a final state once all are submitted."""
        return 90.0 if self.fast else 150.0


@dataclass
class Plan:
    fillers: list[DemoJob]
    main: list[DemoJob]
    burst: list[DemoJob]

    @property
    def all(self) -> list[DemoJob]:
        return [*self.fillers, *self.main, *self.burst]


def make_plan(opts: Options) -> Plan:
    rng = random.Random(opts.seed)
    pace = Pace.fast() if opts.fast else Pace()
    # 8 x 4 GPUs = every GPU of the three GPU clusters, plus long CPU jobs that prefer east.
    fillers = filler_jobs(8, rng, pace) + long_cpu_jobs(4, rng, pace)
    burst = burst_jobs(max(4, opts.jobs // 20), rng, pace)
    main = main_jobs(max(opts.jobs - len(fillers) - len(burst), 4), rng, pace)
    return Plan(fillers=fillers, main=main, burst=burst)


def prepare_data_dir(path: Path, *, now: float | None = None) -> Path | None:
    """A fresh log for each demo; the previous demo's is kept aside, never deleted.

    Returns where the previous one went (``<dir>.prev-<UTC time>``), or None if there was none.
    A directory the demo did not create is refused.
    """
    kept: Path | None = None
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise DemoError(
                f"{path} exists and was not made by `kdispatch demo`; choose another --data-dir "
                "(the demo starts from an empty log)"
            )
        kept = keep_aside(path, now=time.time() if now is None else now)
    path.mkdir(parents=True, exist_ok=True)
    return kept


def keep_aside(path: Path, *, now: float) -> Path:
    """Rename ``path`` to ``<path>.prev-<YYYYmmddTHHMMSSZ>`` (``-2``, ``-3``… if that is taken)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = path.with_name(f"{path.name}.prev-{stamp}")
    n = 2
    while target.exists():
        target = path.with_name(f"{path.name}.prev-{stamp}-{n}")
        n += 1
    path.rename(target)
    return target


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class Demo:
    def __init__(self, opts: Options, *, screen: Screen) -> None:
        self.opts = opts
        self.screen = screen
        self.data_dir = opts.data_dir.absolute()
        self.plan = make_plan(opts)
        self.recorder = Recorder(gpu_resource="nvidia.com/gpu")
        self.submitted = 0
        self.admission_failures: list[str] = []
        self.loop: LeaderLoop | None = None
        self.sims: dict[str, SimCluster] = {}
        self.webhook: Supervised | None = None
        self.run_id = uuid.uuid4().hex[:8]
        self.replay_result: Any = None
        self.http_port = free_port()  # /metrics, /api/v1 and the web page
        self.metrics: ReconcilerMetrics | None = None
        self.reported = False

    # ------------------------------------------------------------------ the pieces

    def _summary(self) -> dict[str, Any] | None:
        if self.loop is None or self.loop.state is None:
            return None
        summary: dict[str, Any] = core.summary(self.loop.state)
        return summary

    async def _wait_webhook(self, api: ApiServer, ca: Path) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.webhook is not None and self.webhook.starts > 1:
                raise DemoError("the webhook child process exited during start-up (see its log lines above)")
            if ca.exists() and await api.ready():
                return
            await asyncio.sleep(0.2)
        raise DemoError("the webhook did not become ready within 60 s")

    async def _submit(self, api: ApiServer, job: DemoJob) -> None:
        try:
            admitted = await api.create(job.manifest)
        except (AdmissionFailed, OSError, TimeoutError) as err:
            self.admission_failures.append(f"{job.key}: {err}")
            self.screen.say(f"admission of {job.key} failed: {err}")
            return
        self.submitted += 1
        for warning in admitted.warnings:
            self.screen.say(f"webhook warning for {job.key}: {warning}")

    async def _submit_all(self, api: ApiServer, jobs: list[DemoJob]) -> None:
        await asyncio.gather(*(self._submit(api, j) for j in jobs))

    # ------------------------------------------------------------------ the script

    async def _stream(self, api: ApiServer, started: asyncio.Event) -> None:
        interval = self.opts.window_s / max(len(self.plan.main), 1)
        for i, job in enumerate(self.plan.main):
            await self._submit(api, job)
            if i + 1 >= len(self.plan.main) * 0.45:
                started.set()
            await asyncio.sleep(interval)
        started.set()

    async def _fault_and_burst(self, api: ApiServer, midway: asyncio.Event) -> None:
        await midway.wait()
        name = setup.SILENT_CLUSTER
        self.screen.say(f"{name} goes silent for {self.opts.silence_s:.0f}s (heartbeats stop, requests are lost)")
        self.sims[name].silence(self.opts.silence_s)
        deadline = time.monotonic() + setup.WORKER_LOST_TIMEOUT_S + 15
        while self.recorder.clusters_lost == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.screen.say(f"burst: {len(self.plan.burst)} high-priority GPU jobs arrive while {name} is away")
        await self._submit_all(api, self.plan.burst)

    async def _progress(self, stop: asyncio.Event) -> None:
        total = len(self.plan.all)
        while not stop.is_set():
            self.screen.progress(
                submitted=self.submitted,
                total=total,
                status=progress_status(summary=self._summary(), recorder=self.recorder),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    def _not_final(self) -> dict[str, str]:
        summary = self._summary() or {}
        jobs = summary.get("jobs", {})
        out = {}
        for job in self.plan.all:
            phase = str(jobs.get(job.key, {}).get("phase", "missing"))
            if phase not in FINAL_PHASES:
                out[job.key] = phase
        return out

    async def _wait_final(self, tasks: list[asyncio.Task[Any]]) -> dict[str, str]:
        """Until every job is final, the timeout passes, or a component died (no point waiting)."""
        deadline = time.monotonic() + self.opts.timeout_s
        while time.monotonic() < deadline:
            left = self._not_final()
            if not left or any(t.done() and not t.cancelled() and t.exception() for t in tasks):
                return left
            await asyncio.sleep(0.25)
        return self._not_final()

    # ------------------------------------------------------------------ the run

    async def run(self) -> Outcome:
        from eventlog.jetstream import connect

        kept = prepare_data_dir(self.data_dir)
        if kept is not None:
            self.screen.say(f"the previous demo's data dir is kept as {kept} (this run starts a fresh log)")
        config_path, config = setup.write_config(self.data_dir)
        outcome = Outcome()
        with (self.data_dir / "demo.log").open("a") as log_file:
            klog.configure(level="info", stream=log_file, role="demo")
            jlog = await connect(None, data_dir=self.data_dir, name="kdispatch-demo")
            try:
                self.screen.say(f"embedded nats-server at {jlog.url}, data in {self.data_dir} (logs: demo.log)")
                # While the demo runs (and holds), `kdispatch status/log/... --data-dir` read
                # through this server: two servers cannot share one store.
                (self.data_dir / URL_FILE).write_text(jlog.url + "\n")
                follower = LogFollower(jlog.reader, self.recorder, on_story=lambda _e, s: self.screen.say(s))
                await self._operate(jlog, config=config, config_path=config_path, follower=follower, outcome=outcome)
                await self._verify(jlog, outcome)
                await follower.catch_up()
                self._check_scenario(outcome)
                outcome.summary = self._summary_doc(outcome)
                if self.opts.hold:
                    print(self.report(outcome))
                    self.reported = True
                    await self._hold(jlog)
            finally:
                await jlog.close()
        return outcome

    async def _operate(
        self, jlog: Any, *, config: Any, config_path: Path, follower: LogFollower, outcome: Outcome
    ) -> None:
        """Start every component, play the script, wait for the end, stop every component."""
        stop = asyncio.Event()
        tasks: list[asyncio.Task[Any]] = []  # the system's and the demo's own
        own: list[asyncio.Task[Any]] = []
        system: System | None = None
        try:
            port = free_port()
            argv = [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(port), "--nats", jlog.url]
            argv += ["--data-dir", str(self.data_dir), "--config", str(config_path), "--log-level", "warning"]
            if self.opts.queues_path is not None:
                argv += ["--queues", str(self.opts.queues_path)]
            settings = Settings(
                loop=LoopSettings(
                    leader_id=f"demo-{self.run_id}",
                    policy=policy_event(config.policy),
                    queues=self.opts.queues,
                    plugins=installed(),
                ),
                webhook_argv=argv,
                metrics_port=self.http_port,
            )
            system = await build(jlog, config, settings, stop=stop)
            self.webhook, self.loop, self.metrics = system.webhook, system.loop, system.metrics
            assert system.clusters is not None
            workers = system.clusters.configured.workers
            self.sims = {n: w for n, w in workers.items() if isinstance(w, SimCluster)}
            await system.start()
            after = "; --hold keeps it up after the demo" if not self.opts.hold else ", and after it until Ctrl-C"
            self.screen.say(f"web page: {self.page_url} (JSON API under /api/v1) while the demo runs{after}")
            own.append(asyncio.create_task(follower.run(stop), name="follower"))
            own.append(asyncio.create_task(self._progress(stop), name="progress"))
            tasks += [*system.tasks, *own]
            self.screen.say(
                f"4 simulated clusters: {', '.join(self.sims)}; webhook on https://127.0.0.1:{port} (child process)"
            )
            ca = self.data_dir / "webhook-tls" / "ca.crt"
            async with ApiServer(f"https://127.0.0.1:{port}", ca_file=str(ca)) as api:
                await self._wait_webhook(api, ca)
                await self._script(api)
            self.screen.say(f"all {self.submitted} jobs submitted; waiting for every job to finish")
            left = await self._wait_final(tasks)
            if left:
                phases = Counter(left.values())
                sample = ", ".join(sorted(left)[:5])
                outcome.problems.append(
                    f"{len(left)} jobs not in a final state after {self.opts.timeout_s:.0f}s: {dict(phases)} (e.g. {sample})"
                )
            await follower.catch_up()
            self._check_tasks(tasks, outcome)
        finally:
            stop.set()
            if system is not None:
                await system.stop()
            await asyncio.gather(*own, return_exceptions=True)
            self.screen.done()

    @property
    def page_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/"

    async def _hold(self, jlog: Any) -> None:
        """The final state and the page, served until Ctrl-C (or SIGTERM): the system has stopped,
        so this is the state the demo ended on, read-only."""
        import signal

        from reconciler.service.metrics import start_metrics_server
        from reconciler.service.web import ViewSource, add_routes

        source = ViewSource(state=lambda: self.loop.state if self.loop else None, reader=jlog.reader)
        runner = await start_metrics_server(
            self.metrics or ReconcilerMetrics(),
            host="127.0.0.1",
            port=self.http_port,
            routes=lambda app: add_routes(app, source),
        )
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, done.set)
        print(f"holding the demo's final state: {self.page_url} (Ctrl-C to stop)", flush=True)
        try:
            await done.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await runner.cleanup()

    async def _script(self, api: ApiServer) -> None:
        self.screen.say(f"webhook ready; submitting {len(self.plan.all)} jobs as AdmissionReviews over HTTPS")
        await self._submit_all(api, self.plan.fillers)
        self.screen.say(
            f"{len(self.plan.fillers)} long jobs first: low-priority GPU training filling the GPU clusters, "
            "and CPU jobs that prefer east"
        )
        await asyncio.sleep(1.5)
        midway = asyncio.Event()
        await asyncio.gather(self._stream(api, midway), self._fault_and_burst(api, midway))

    def _check_tasks(self, tasks: list[asyncio.Task[Any]], outcome: Outcome) -> None:
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                outcome.problems.append(f"component {task.get_name()} failed: {task.exception()!r}")
        if self.webhook is not None and self.webhook.starts > 1:
            outcome.problems.append(f"the webhook child process died and was restarted {self.webhook.starts - 1} time(s)")

    async def _verify(self, jlog: Any, outcome: Outcome) -> None:
        result = await replay(jlog.reader, verify=True)
        self.replay_result = result
        if result.mismatch is not None:
            outcome.problems.append(f"replay --verify: {result.mismatch.reason}")
        else:
            self.screen.say(f"replay --verify: {result.verified_batches} decision batches recomputed identically ({result.entries} log entries)")

    def _check_scenario(self, outcome: Outcome) -> None:
        if self.admission_failures:
            outcome.problems.append(f"{len(self.admission_failures)} admissions failed, e.g. {self.admission_failures[0]}")
        lost = self.recorder.clusters.get(setup.SILENT_CLUSTER)
        if lost is None or lost.lost == 0:
            outcome.problems.append(f"{setup.SILENT_CLUSTER} was never declared Lost")
        elif lost.requeued_by_loss == 0:
            outcome.problems.append(f"no job was requeued when {setup.SILENT_CLUSTER} was lost")
        elif lost.replaced_after_loss + lost.finished_while_lost < lost.requeued_by_loss:
            outcome.problems.append(
                f"of {lost.requeued_by_loss} jobs requeued when {setup.SILENT_CLUSTER} was lost, only "
                f"{lost.replaced_after_loss} were placed again and {lost.finished_while_lost} finished there meanwhile"
            )
        if self.recorder.preemptions == 0:
            outcome.problems.append("the high-priority burst preempted nothing")

    def _explain_target(self) -> str:
        """A real job worth explaining: one that preempted, else one re-placed after the loss."""
        for rec in self.recorder.jobs.values():
            if rec.key.startswith("demo/urgent") and rec.placed_ms is not None:
                return rec.key
        for rec in self.recorder.jobs.values():
            if rec.placements > 1:
                return rec.key
        return self.plan.main[0].key

    def _summary_doc(self, outcome: Outcome) -> dict[str, Any]:
        summary = self._summary() or {}
        phases = Counter(str(j.get("phase")) for j in summary.get("jobs", {}).values())
        records = {r.key: r for r in self.recorder.jobs.values()}
        classes: dict[str, dict[str, Any]] = {}
        for job in self.plan.all:
            rec = records.get(job.key)
            c = classes.setdefault(job.job_class, {"jobs": 0, "finished": 0, "waits": []})
            c["jobs"] += 1
            if rec is not None and rec.finished_ms is not None:
                c["finished"] += 1
            if rec is not None and rec.wait_ms is not None:
                c["waits"].append(rec.wait_ms)
        for c in classes.values():
            waits = sorted(c.pop("waits"))
            c["wait_p50_s"] = seconds(percentile(waits, 50))
            c["wait_p95_s"] = seconds(percentile(waits, 95))
        result = self.replay_result
        return {
            "ok": outcome.ok,
            "problems": outcome.problems,
            "jobs": len(self.plan.all),
            "submitted": self.submitted,
            "phases": dict(sorted(phases.items())),
            "silent_cluster": setup.SILENT_CLUSTER,
            "preemptions": self.recorder.preemptions,
            "clusters": {
                name: {**vars(self.recorder.clusters[name]), "health": summary.get("clusters", {}).get(name, {}).get("health")}
                for name in sorted(self.recorder.clusters)
            },
            "classes": dict(sorted(classes.items())),
            "replay": {
                "entries": result.entries if result else None,
                "verified_batches": result.verified_batches if result else None,
                "mismatch": result.mismatch.reason if result and result.mismatch else None,
            },
            "explain_job": self._explain_target(),
            "elapsed_s": round(self.screen.elapsed(), 1),
        }

    def report(self, outcome: Outcome) -> str:
        from eventlog.embedded import find_binary

        names = list(self.sims)
        lines = [
            "",
            "Per cluster:",
            cluster_table(self.recorder, self._summary(), names),
            "",
            "Per job class (wait = submission to placement):",
            class_table(self.recorder, self.plan.all),
            "",
            f"preemptions: {self.recorder.preemptions}, clusters lost: {self.recorder.clusters_lost}, "
            f"elapsed {self.screen.elapsed():.0f}s",
            "",
            next_steps(
                data_dir=self.data_dir,
                job=outcome.summary.get("explain_job", ""),
                kdispatch=kdispatch_command(),
                nats_server=str(find_binary()),
            ),
            "",
        ]
        if outcome.ok:
            lines.append("demo OK: every job finished, the lost cluster's jobs were re-placed (or had finished there), replay --verify passed")
        else:
            lines.append("demo FAILED:")
            lines += [f"  - {p}" for p in outcome.problems]
        return "\n".join(lines)


def kdispatch_command() -> str:
    """How this very program was started, to print hints a person can paste as they are:
    ``make demo`` leaves ``kdispatch`` in ``.venv/bin``, which is not on PATH."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if argv0.suffix == ".py":  # python -m reconciler (__main__.py) or python -m reconciler.cli
        module = "reconciler" if argv0.name == "__main__.py" else "reconciler.cli"
        return f"{shlex.quote(_shortest(Path(sys.executable)))} -m {module}"
    if argv0.name and argv0.exists():
        return shlex.quote(_shortest(argv0.absolute()))
    return "kdispatch"


def _shortest(path: Path) -> str:
    """Relative to the current directory when under it (``.venv/bin/kdispatch``), else absolute."""
    try:
        rel = path.relative_to(Path.cwd().resolve())
    except ValueError:
        return str(path)
    return str(rel) if len(rel.parts) > 1 else f"./{rel}"


async def run_demo(opts: Options, *, screen: Screen | None = None) -> int:
    screen = screen or Screen(quiet=opts.quiet)
    demo = Demo(opts, screen=screen)
    try:
        outcome = await demo.run()
    except DemoError as err:
        print(f"kdispatch demo: {err}", file=sys.stderr)
        return 2
    (demo.data_dir / "demo-summary.json").write_text(json.dumps(outcome.summary, indent=2) + "\n")
    if not demo.reported:
        print(demo.report(outcome))
    return 0 if outcome.ok else 1
