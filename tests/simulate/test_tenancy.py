"""``kdispatch simulate --queues``: jobs in teams, per-queue fairness in results.json, through the CLI
with the real core and the real SimWorker on the Tiresias sample (60 GPU jobs on one 8-GPU cluster)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from eventlog.kube.kueue import load_queues
from reconciler.cli import main
from reconciler.simulate.fairness import jain, water_fill
from reconciler.simulate.tenants import parse_mix, pick
from tests.paths import TRACES

TIRESIAS = TRACES / "tiresias-sample" / "60_job.csv"
ONE_CLUSTER = """
clusters:
  - name: solo
    simulated: {capacity: {cpu: "64", memory: 256Gi, nvidia.com/gpu: 8}, admissionLatency: 0ms}
"""
TOPK1 = """
name: topk-1
filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
scores: [CapacityScore]
strategy: {type: TopK, k: 1}
"""


def _queue(name: str, *, weight: int, gpus: int, borrow: int) -> str:
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohortName: lab
  namespaceSelector: {{}}
  fairSharing: {{weight: "{weight}"}}
  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {{name: cpu, nominalQuota: "32"}}
      - {{name: memory, nominalQuota: 128Gi}}
      - {{name: nvidia.com/gpu, nominalQuota: {gpus}, borrowingLimit: {borrow}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: {name}, name: default}}
spec: {{clusterQueue: {name}}}
"""


def _teams(borrow: int) -> str:
    """Two teams of equal weight with 4 GPUs each of the 8; each may borrow ``borrow`` of the other's."""
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"
        + _queue("team-a", weight=1, gpus=4, borrow=borrow)
        + _queue("team-b", weight=1, gpus=4, borrow=borrow)
    )


TWO_TEAMS = _teams(4)
QUEUE_KEYS = {"weight", "entitled_share", "achieved_share", "wait_p50_s", "wait_p95_s", "preemptions", "max_usage"}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {"clusters": tmp_path / "solo.yaml", "profile": tmp_path / "topk1.yaml", "queues": tmp_path / "teams.yaml"}
    out["clusters"].write_text(ONE_CLUSTER)
    out["profile"].write_text(TOPK1)
    out["queues"].write_text(TWO_TEAMS)
    return out


def _simulate(files: dict[str, Path], out: Path, *extra: str, trace: Path = TIRESIAS) -> dict[str, Any]:
    code = main(
        ["simulate", "--trace", str(trace), "--clusters", str(files["clusters"]), "--profile", str(files["profile"]),
         "--queues", str(files["queues"]), "--out", str(out), "--quiet", *extra]
    )
    assert code == 0
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc["profiles"]["topk-1"]


def test_results_per_queue_add_up_and_stay_within_limits(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    res = _simulate(files, tmp_path / "out")
    queues = res["queues"]
    assert sorted(queues) == ["team-a", "team-b"]
    for q in queues.values():
        assert set(q) >= QUEUE_KEYS
        assert q["weight"] == 1.0
    # Every job is in one queue; the preemptions are the profile's.
    assert sum(q["jobs"] for q in queues.values()) == res["jobs"] == 60
    assert sum(q["placed"] for q in queues.values()) == res["placed"]
    assert sum(q["preemptions"] for q in queues.values()) == res["preemptions"]
    # 60 jobs on 8 GPUs: the teams compete, and the shares of what they held add up to 1.
    assert res["contended_s"] > 0
    assert math.isclose(sum(q["achieved_share"] for q in queues.values()), 1.0, abs_tol=1e-3)
    assert math.isclose(sum(q["entitled_share"] for q in queues.values()), 1.0, abs_tol=1e-3)
    assert 0.0 <= res["jain_index"] <= 1.0
    for q in queues.values():  # nominal 4 + borrowingLimit 4
        assert q["limit"]["default/nvidia.com/gpu"] == 8
        assert 0 < q["max_usage"]["default/nvidia.com/gpu"] <= 8
        assert q["over_limit"] == []
        assert q["starved"] == 0
    assert (tmp_path / "out" / "queue_shares.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "team-a" in printed and "Jain index" in printed


def test_a_busy_team_borrows_up_to_its_limit_and_no_further(tmp_path: Path, files: dict[str, Path]) -> None:
    """Nine jobs in ten go to team-a: it borrows team-b's idle GPUs, but never more than 2 (6 in
    all), so its 8-GPU jobs can never start: they are the starved ones (as in Kueue)."""
    files["queues"].write_text(_teams(2))
    res = _simulate(files, tmp_path / "out", "--tenant-mix", "team-a=0.9,team-b=0.1")
    a, b = res["queues"]["team-a"], res["queues"]["team-b"]
    assert a["jobs"] > 4 * b["jobs"]
    assert a["max_usage"]["default/nvidia.com/gpu"] == 6
    assert b["max_usage"]["default/nvidia.com/gpu"] <= 6
    mix = parse_mix("team-a=0.9,team-b=0.1", load_queues(files["queues"]))
    eights = [line.split(",")[0] for line in TIRESIAS.read_text().splitlines()[1:] if line.split(",")[1] == "8"]
    by_team = [pick(f"tiresias-{job}", mix).namespace for job in eights]
    assert (a["starved"], b["starved"]) == (by_team.count("team-a"), by_team.count("team-b"))
    assert a["starved"] > 0


def test_queue_column_of_a_csv_trace(tmp_path: Path, files: dict[str, Path]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "job,submit_s,runtime_s,gpu,queue\n"
        "a1,0,100,4,team-a\n"
        "a2,0,100,4,team-a/default\n"
        "b1,1,100,2,team-b\n"
        "x1,2,100,1,\n"
    )
    out = tmp_path / "out"
    res = _simulate(files, out, "--tenant-mix", "team-b=1", trace=trace)
    assert res["queues"]["team-a"]["jobs"] == 2
    assert res["queues"]["team-b"]["jobs"] == 2  # b1, and x1 by the mix
    rows = {r["job"] for r in map(json.loads, (out / "placements.jsonl").read_text().splitlines())}
    # Submitted in the LocalQueue's namespace, as the webhook would see them.
    assert rows == {"team-a/a1", "team-a/a2", "team-b/b1", "team-b/x1"}
    again = tmp_path / "again"
    _simulate(files, again, "--tenant-mix", "team-b=1", trace=trace)
    assert (again / "results.json").read_bytes() == (out / "results.json").read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant-mix", "taem-a=1"], "did you mean 'team-a'"),
        (["--tenant-mix", "default=1"], "is a LocalQueue in 2 namespaces"),
        (["--tenant-mix", "team-a=0"], "must be above 0"),
        (["--tenant-mix", "team-a"], "expected name=fraction"),
    ],
)
def test_bad_tenant_mix_is_refused(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = main(
        ["simulate", "--trace", str(TIRESIAS), "--clusters", str(files["clusters"]), "--profile", str(files["profile"]),
         "--queues", str(files["queues"]), "--quiet", *args]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_tenant_mix_needs_queues(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(TIRESIAS), "--tenant-mix", "a=1", "--quiet"]) == 2
    assert "give --queues" in capsys.readouterr().err


def test_the_hash_mix_follows_the_fractions(tmp_path: Path) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text(TWO_TEAMS)
    mix = parse_mix("team-a=3,team-b=1", load_queues(path))
    picked = [pick(f"job-{i}", mix).namespace for i in range(4000)]
    assert abs(picked.count("team-a") / len(picked) - 0.75) < 0.03
    assert picked == [pick(f"job-{i}", mix).namespace for i in range(4000)]  # by name alone


def test_water_fill_gives_a_capped_queue_only_its_demand() -> None:
    assert water_fill(0.9, [2, 1, 1], [1, 1, 1]) == pytest.approx([0.45, 0.225, 0.225])
    # The first wants only 0.1: the rest is split 1:1 between the others.
    assert water_fill(0.9, [2, 1, 1], [0.1, 1, 1]) == pytest.approx([0.1, 0.4, 0.4])
    # Weight 0 gets only what nobody else can take.
    assert water_fill(1.0, [1, 0], [0.6, 1]) == pytest.approx([0.6, 0.4])


def test_jain_index() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain([]) is None


def _late_team_trace(tmp_path: Path) -> Path:
    """team-a fills all 8 GPUs at 0 s for 1000 s (4 of them borrowed); team-b's 4 jobs arrive at 100 s."""
    trace = tmp_path / "jobs.csv"
    rows = [f"a{i},0,1000,1,team-a" for i in range(8)] + [f"b{i},100,500,1,team-b" for i in range(4)]
    trace.write_text("job,submit_s,runtime_s,gpu,queue\n" + "\n".join(rows) + "\n")
    return trace


def test_a_team_kept_waiting_while_another_borrows_is_unfair(tmp_path: Path, files: dict[str, Path]) -> None:
    """Without reclaim (preemption Never), team-b waits 900 s while team-a holds all 8 GPUs. That
    is contended (team-b waits, team-a has demand) though only one team waits: entitled 1/2 each,
    achieved 1 and 0, so the Jain index is (2 + 0)^2 / (2 * (4 + 0)) = 1/2."""
    files["queues"].write_text(TWO_TEAMS.replace("reclaimWithinCohort: Any, withinClusterQueue: LowerPriority", ""))
    res = _simulate(files, tmp_path / "out", trace=_late_team_trace(tmp_path))
    a, b = res["queues"]["team-a"], res["queues"]["team-b"]
    assert (a["preemptions"], b["wait_p50_s"]) == (0, 900.0)
    assert res["contended_s"] == 900.0
    assert (a["entitled_share"], b["entitled_share"]) == (0.5, 0.5)
    assert (a["achieved_share"], b["achieved_share"]) == (1.0, 0.0)
    assert res["jain_index"] == 0.5


def test_a_newly_active_team_takes_its_share_back_in_one_round(tmp_path: Path, files: dict[str, Path]) -> None:
    """team-a fills all 8 GPUs (4 of them borrowed); team-b arrives with 4 jobs: it reclaims its
    nominal 4 by preemption, in one round, and holds its share from then on."""
    res = _simulate(files, tmp_path / "out", trace=_late_team_trace(tmp_path))
    a, b = res["queues"]["team-a"], res["queues"]["team-b"]
    assert a["max_usage"]["default/nvidia.com/gpu"] == 8  # borrowed all of team-b's idle quota
    assert b["max_usage"]["default/nvidia.com/gpu"] == 4
    assert a["preemptions"] == 4 and b["preemptions_caused"] == 4
    joined = res["newly_active"]["first"]["team-b"]
    assert joined["at_s"] == 100.0
    assert joined["others_waiting"] is False  # team-a's jobs all run: only team-b waits
    assert joined["preemption_rounds"] == 1
    assert joined["reached_after_s"] == 0.0  # no admission latency: preempted and started at once
    assert all(q["starved"] == 0 for q in res["queues"].values())


def test_quotas_above_the_fleet_a_team_within_its_quota_reclaims_what_fills_the_cluster(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """6 GPUs of quota each on the 8-GPU cluster: team-a fills it (2 borrowed); team-b's jobs fit
    its quota but not the cluster. It reclaims by preemption only what team-a borrows (2), in one
    round; its other 2 jobs wait for team-a's own (no thrash: team-a at its nominal quota is
    nobody's victim)."""
    files["queues"].write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"
        + _queue("team-a", weight=1, gpus=6, borrow=6)
        + _queue("team-b", weight=1, gpus=6, borrow=6)
    )
    res = _simulate(files, tmp_path / "out", trace=_late_team_trace(tmp_path))
    a, b = res["queues"]["team-a"], res["queues"]["team-b"]
    assert a["max_usage"]["default/nvidia.com/gpu"] == 8
    assert a["preemptions"] == 2 and b["preemptions_caused"] == 2
    assert res["newly_active"]["first"]["team-b"]["preemption_rounds"] == 1
    assert b["wait_p95_s"] >= 500  # two of its jobs waited for team-a's own to finish
    assert all(q["starved"] == 0 for q in res["queues"].values())
