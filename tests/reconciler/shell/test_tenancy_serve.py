"""Three teams through ``kdispatch serve --queues`` with a real nats-server and a simulated cluster:
fair ordering (weighted DRF) when all three wait, borrowing (one team alone uses more than its
quota), reclaim by preemption (a team under its quota takes it back), as the log records it and as
``kdispatch status`` and ``explain`` show it; then a fleet smaller than the quotas, which a
borrowing team fills, and the teams under their quota reclaim it by preemption.
``replay --verify`` holds over each whole log.

Every wait is on log entries or command output, bounded by a deadline (a loaded machine is slow,
not wrong); every check is on what was decided, never on when."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog

from .scenario import read_all, wait_for

CONFIG = """\
policy:
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
      scores: [CapacityScore]
      strategy: {type: TopK, k: 1}
clusters:
  - name: east
    heartbeatInterval: 500ms
    simulated: {capacity: {cpu: "%d"}, admissionLatency: 20ms, defaultRuntime: 1h}
"""

TEAMS = {"a": 1, "b": 1, "c": 2}  # fairSharing.weight
NOMINAL = 2  # cores each; the cohort adds 6 of its own: 12 to share, on a 16-core cluster
FLEET, QUOTA = 16, 12


def _queues(nominal: int = NOMINAL, cohort: int = 6) -> str:
    docs = [
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n",
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: all}\nspec:\n"
        "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: default\n"
        f"      resources: [{{name: cpu, nominalQuota: {cohort}}}]\n",
    ]
    for team, weight in TEAMS.items():
        docs.append(
            f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: all
  namespaceSelector: {{}}
  fairSharing: {{weight: "{weight}"}}
  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources:
      - {{name: cpu, nominalQuota: {nominal}}}
"""
        )
        docs.append(
            f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
            f"metadata: {{namespace: team-{team}, name: default}}\nspec: {{clusterQueue: {team}}}\n"
        )
    return "---\n".join(docs)


def job(team: str, i: int) -> ev.JobRef:
    return ev.JobRef(namespace=f"team-{team}", name=f"{team}-{i}", uid=f"uid-{team}-{i}")


def submitted(team: str, i: int) -> ev.JobSubmitted:
    # No queue label and no resolved ClusterQueue: the namespace's "default" LocalQueue takes it.
    return ev.JobSubmitted(job=job(team, i), pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 1000})])


def admitted_by_team(entries: list[ev.LogEntry]) -> Counter[str]:
    """Jobs holding quota now, per team, from the decisions (nominated or placed, not since
    evicted, requeued or withdrawn from every cluster)."""
    holding: dict[str, str] = {}
    for e in entries:
        event = e.event
        if isinstance(event, ev.Nominated):
            holding[event.job.key] = event.job.namespace.removeprefix("team-")
        elif isinstance(event, ev.Requeued | ev.Finished) or (
            isinstance(event, ev.JobDeleted) and event.job.key in holding
        ):
            holding.pop(event.job.key, None)
    return Counter(holding.values())


def drf_order(waiting: dict[str, int], count: int) -> list[str]:
    """The reference: each core of quota goes to the team with the lowest weighted dominant share
    (usage / fleet / weight) that has a job waiting, ties by name."""
    used = dict.fromkeys(TEAMS, 0)
    left = dict(waiting)
    order = []
    for _ in range(count):
        team = min((t for t in TEAMS if left[t]), key=lambda t: (Fraction(used[t], FLEET * TEAMS[t]), t))
        used[team] += 1
        left[team] -= 1
        order.append(team)
    return order


def kd(nats_url: str, root: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *argv, "--nats", nats_url, "--root", root, "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_three_teams_borrow_reclaim_and_share_fairly(
    jslog: JetStreamLog, nats_url: str, log_root: str, tmp_path: Path
) -> None:
    config, queues = tmp_path / "kdispatch.yaml", tmp_path / "queues.yaml"
    config.write_text(CONFIG % FLEET)
    queues.write_text(_queues())
    # All three teams wait before the fleet exists: when the cluster registers, the cohort's 12
    # cores of quota are handed out in one go, in the fair order; every team ends above its own
    # quota, so nobody reclaims.
    for team in TEAMS:
        for i in range(8):
            await jslog.inbox.publish(submitted(team, i), msg_id=f"submit/{team}/{i}")
    log_file = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "reconciler", "serve", "--nats", nats_url, "--root", log_root),
            *("--config", str(config), "--queues", str(queues), "--data-dir", str(tmp_path / "data")),
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        # 1. Fair ordering: the 12 admissions follow weighted DRF (c, weight 2, gets twice as much
        #    as a or b), and nobody is preempted for it.
        entries = await wait_for(jslog, lambda es: admitted_by_team(es).total() >= QUOTA, timeout_s=90)
        nominated = [e.event.job.namespace.removeprefix("team-") for e in entries if isinstance(e.event, ev.Nominated)]
        assert nominated == drf_order({t: 8 for t in TEAMS}, QUOTA), nominated
        assert Counter(nominated) == {"a": 3, "b": 3, "c": 6}

        # 2. Borrowing: b and c leave; a, alone, takes all 12, six times its own quota.
        for team in ("b", "c"):
            for i in range(8):
                await jslog.inbox.publish(ev.JobDeleted(job=job(team, i)), msg_id=f"delete/{team}/{i}")
        for i in range(8, 12):
            await jslog.inbox.publish(submitted("a", i), msg_id=f"submit/a/{i}")
        entries = await wait_for(jslog, lambda es: admitted_by_team(es) == {"a": 12}, timeout_s=90)
        mark = entries[-1].seq
        status = json.loads(kd(nats_url, log_root, "status", "-o", "json").stdout)
        a_row = next(q for q in status["queues"] if q["name"] == "a")
        assert a_row["admitted"] == 12 and a_row["usage"] == {"default/cpu": 12_000}
        assert a_row["quota"] == {"default/cpu": NOMINAL * 1000} and a_row["weight"] == 1

        # 3. Reclaim: b comes back with 2 jobs; it is under its quota and a borrows, so exactly 2 of
        #    a's jobs are evicted (not more: b is then at its quota) and b runs 2.
        for i in range(8, 10):
            await jslog.inbox.publish(submitted("b", i), msg_id=f"submit/b/{i}")
        entries = await wait_for(jslog, lambda es: admitted_by_team(es) == {"a": 10, "b": 2}, timeout_s=90)
        evicted = [e.event for e in entries if e.seq > mark and isinstance(e.event, ev.Evict)]
        assert len(evicted) == 2 and {v.job.namespace for v in evicted} == {"team-a"}, evicted
        assert all(v.preemptor is not None and v.preemptor.namespace == "team-b" for v in evicted)

        # As a user sees it: the queue table, and why a preempted job of a's waits.
        table = kd(nats_url, log_root, "status")
        assert table.returncode == 0, table.stderr
        row = next(line.split() for line in table.stdout.splitlines() if line.startswith("a "))
        assert row[1:3] == ["2", "10"]  # pending (the 4 evicted, back in line), admitted
        waiting = evicted[0].job.key
        why = kd(nats_url, log_root, "explain", waiting)
        assert why.returncode == 0, why.stderr
        assert "queue: ClusterQueue a (cohort all, weight 1, BestEffortFIFO), position " in why.stdout, why.stdout
        assert "default/cpu: 10 used of 2 nominal (8 borrowed)" in why.stdout, why.stdout
        as_json = json.loads(kd(nats_url, log_root, "explain", waiting, "--json").stdout)
        assert as_json["now"]["queue"]["cluster_queue"] == "a" and as_json["now"]["queue"]["position"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log_file.close()
    verify = kd(nats_url, log_root, "replay", "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    recorded = [e for e in await read_all(jslog) if isinstance(e.event, ev.QueuesConfigured)]
    assert len(recorded) == 1



def placed(entries: list[ev.LogEntry], team: str) -> int:
    return sum(1 for e in entries if isinstance(e.event, ev.Placed) and e.event.job.namespace == f"team-{team}")


async def test_teams_under_their_quota_reclaim_a_fleet_a_borrower_fills(
    jslog: JetStreamLog, nats_url: str, log_root: str, tmp_path: Path
) -> None:
    # 4 cores of quota each (12) on an 8-core fleet: a borrows all 8 cores; b and c then fit their
    # quota but no cluster, and take back what a borrows by preemption (reclaimWithinCohort).
    config, queues = tmp_path / "kdispatch.yaml", tmp_path / "queues.yaml"
    config.write_text(CONFIG % 8)
    queues.write_text(_queues(nominal=4, cohort=0))
    for i in range(10):
        await jslog.inbox.publish(submitted("a", i), msg_id=f"submit/a/{i}")
    log_file = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "reconciler", "serve", "--nats", nats_url, "--root", log_root),
            *("--config", str(config), "--queues", str(queues), "--data-dir", str(tmp_path / "data")),
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        # 1. a alone fills the fleet: 8 run (4 of them borrowed), 2 wait for capacity.
        entries = await wait_for(jslog, lambda es: placed(es, "a") >= 8, timeout_s=90)
        assert admitted_by_team(entries) == {"a": 8}
        mark = entries[-1].seq

        # 2. b and c come, each under its quota: each reclaims 2 cores of the 4 a borrows.
        for team in ("b", "c"):
            for i in range(2):
                await jslog.inbox.publish(submitted(team, i), msg_id=f"submit/{team}/{i}")
        entries = await wait_for(jslog, lambda es: admitted_by_team(es) == {"a": 4, "b": 2, "c": 2}, timeout_s=90)
        evicted = [e.event for e in entries if e.seq > mark and isinstance(e.event, ev.Evict)]
        assert len(evicted) == 4 and {v.job.namespace for v in evicted} == {"team-a"}, evicted
        preemptors = Counter(v.preemptor.namespace for v in evicted if v.preemptor is not None)
        assert preemptors == {"team-b": 2, "team-c": 2}, preemptors
        # a is back at its quota: the jobs it lost wait in its queue.
        why = kd(nats_url, log_root, "explain", evicted[0].job.key)
        assert why.returncode == 0, why.stderr
        assert "queue: ClusterQueue a (cohort all, weight 1, BestEffortFIFO), position " in why.stdout, why.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log_file.close()
    verify = kd(nats_url, log_root, "replay", "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
