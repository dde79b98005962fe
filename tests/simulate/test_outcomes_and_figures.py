"""Every job ends in exactly one bucket, on real runs; the documented tables are what the command
prints; the baseline and the ratios to it are in results.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.simulate.metrics import OUTCOMES
from tests.paths import REPO, TRACES

TIRESIAS = TRACES / "tiresias-sample" / "60_job.csv"
ALIBABA = TRACES / "alibaba-gpu-v2023"
TOPK1 = """
name: topk-1
filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
scores: [CapacityScore]
strategy: {type: TopK, k: 1}
"""


@pytest.mark.parametrize(
    ("trace", "extra"),
    [
        # 32 GPUs... an eighth of the clusters: 10 gangs are larger than any cluster, never placed.
        (TIRESIAS, ["--capacity-scale", "0.125"]),
        # The Alibaba trace contends by default; its users delete jobs, placed and not.
        (ALIBABA, ["--limit", "700"]),
    ],
    ids=["tiresias-never-placed", "alibaba-deletions"],
)
def test_every_job_is_in_exactly_one_final_bucket(tmp_path: Path, trace: Path, extra: list[str]) -> None:
    profile = tmp_path / "topk1.yaml"
    profile.write_text(TOPK1)
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(trace), "--profile", str(profile), *extra, "--out", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())["profiles"]["topk-1"]
    final = res["outcomes"]
    assert list(final) == list(OUTCOMES)
    assert sum(final.values()) == res["jobs"]
    assert res["finished"] + res["deleted"] + res["unfinished"] == res["jobs"]
    rows = [json.loads(line) for line in (out / "placements.jsonl").read_text().splitlines()]
    assert len(rows) == res["jobs"]
    # The buckets agree with what each job's own row says.
    assert final["finished"] == sum(1 for r in rows if r["finished"] is not None)
    assert final["never_placed"] == sum(1 for r in rows if r["placed"] is None and r["deleted"] is None)
    if trace == TIRESIAS:
        assert final["never_placed"] == 10 and final["finished"] == 50
    else:
        assert final["deleted_before_placement"] + final["deleted_after_placement"] > 0


def test_the_baseline_heads_the_comparison_and_every_profile_has_ratios(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(TIRESIAS), "--capacity-scale", "0.25", "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["baseline"] == "multikueue"
    assert list(doc["profiles"]) == ["multikueue", "all-at-once", "incremental-3", "topk-1", "topk-2"]
    base = doc["profiles"]["multikueue"]
    assert base["label"] == "MultiKueue (baseline)"
    assert base["strategy"]["nominated_hold"] == "none"
    assert all(v in (1.0, None) for v in base["vs_baseline"].values())
    topk1 = doc["profiles"]["topk-1"]
    assert topk1["vs_baseline"]["remote_copies_per_job"] == round(
        topk1["remote_copies_per_job"] / base["remote_copies_per_job"], 3
    )
    for key in ("wait_mean_s", "wait_p50_s", "wait_p90_s", "wait_p95_s", "wait_p99_s", "waited_over_1s_pct",
                "waited_over_60s_pct"):
        assert key in topk1


def test_the_documented_small_table_is_what_the_command_prints() -> None:
    """docs/simulate.md shows the output of a --limit'ed run; re-run it and compare, character for
    character (the whole-trace tables are checked by `make docs-figures-check`)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "docs_figures.py"), "--check", "--only", "alibaba-first-1500"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "alibaba-first-1500" in (REPO / "docs" / "simulate.md").read_text()
