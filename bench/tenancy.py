"""Fair share on a real trace: the Alibaba GPU 2023 trace, three teams, with and without queues.

Runs one dispatch profile twice in one process on the same jobs, scaled so that the teams compete
(``--capacity-scale``): once without queues, once with ``deploy/examples/alibaba-three-teams.yaml``
(research weight 2, product and ci weight 1, every job in a team by a hash of its name). The team
``ci`` joins late: its jobs submitted before ``--join-h`` hours are research's or product's, so
the run shows a newly active queue taking its share. Prints the per-queue figures and the floors
of issue 13 (definitions: ``reconciler/simulate/fairness.py``, docs/tenancy.md):

- Jain index of achieved/entitled share over the contended periods >= 0.95;
- no queue ever above nominal + borrowingLimit (what its running jobs held);
- GPU utilization >= 0.95x the run without queues, both over the same window (first submission
  to the earlier of the two runs' last finishes; each run's own span is printed too);
- no job waits forever: starvation 0 (never placed, not deleted by its user);
- a newly active queue reaches its fair share within one round of preemption.

    .venv/bin/python bench/tenancy.py [--capacity-scale 0.0085] [--profile topk-1] [--join-h 720] [--out DIR]

The last line is the headline.
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventlog.kube.kueue import load_queues  # noqa: E402
from reconciler.simulate.metrics import utilization  # noqa: E402
from reconciler.simulate.profiles import PolicyDefaults, default_profiles  # noqa: E402
from reconciler.simulate.readers import load_trace  # noqa: E402
from reconciler.simulate.recorder import Recorder  # noqa: E402
from reconciler.simulate.runner import CoreApi  # noqa: E402
from reconciler.simulate.scale import scale_capacity  # noqa: E402
from reconciler.simulate.session import ProfileRun, results_document, run_profile, write_outputs  # noqa: E402
from reconciler.simulate.tenants import assign_queues, find_local_queue, pick  # noqa: E402
from reconciler.simulate.trace import Trace  # noqa: E402

TRACE = ROOT / "data/traces/alibaba-gpu-v2023"
QUEUES = ROOT / "deploy/examples/alibaba-three-teams.yaml"
LATE = "ci"

JAIN_FLOOR = 0.95
UTILIZATION_FLOOR = 0.95
ROUNDS_FLOOR = 1


def teams(trace: Trace, *, join_ms: int) -> Trace:
    """Every job in a team by the hash of its name; ``ci``'s jobs before ``join_ms`` go to the
    other two teams (by the same hash), so ``ci`` becomes active at ``join_ms``."""
    config = load_queues(QUEUES)
    queues = {name: find_local_queue(config, name, where="bench") for name in ("research", "product", "ci")}
    assigned = assign_queues(trace, config, [(q, Fraction(1)) for q in queues.values()])
    early = [(queues["research"], Fraction(1)), (queues["product"], Fraction(1))]
    jobs = []
    for job in assigned.jobs:
        if job.namespace == LATE and job.submit_ms < join_ms:
            lq = pick(job.name, early)
            job = msgspec.structs.replace(job, namespace=lq.namespace, queue=lq.name, cluster_queue=lq.cluster_queue)
        jobs.append(job)
    return msgspec.structs.replace(assigned, jobs=jobs)


def run(trace: Trace, profile_name: str, *, queues: bool) -> tuple[ProfileRun, float]:
    profile = next(p for p in default_profiles() if p.name == profile_name)
    started = time.process_time()
    result = run_profile(
        trace,
        profile=profile,
        settings=PolicyDefaults(),
        core=CoreApi.real(),
        queues=load_queues(QUEUES) if queues else None,
    )
    result.name = f"{profile_name}-queues" if queues else profile_name
    for row in result.placements:
        row["profile"] = result.name
    return result, time.process_time() - started


def shared_window(*recorders: Recorder) -> tuple[int, int]:
    """First submission to the earliest of the runs' last finishes (ms)."""
    start = min(r.first_ms or 0 for r in recorders)
    ends = []
    for r in recorders:
        finished = [j.finished_ms for j in r.jobs.values() if j.finished_ms is not None]
        ends.append(max(finished) if finished else start)
    return start, min(ends)


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity-scale", type=float, default=0.0085)
    parser.add_argument("--profile", default="topk-1", choices=[p.name for p in default_profiles()])
    parser.add_argument("--join-h", type=float, default=720.0, help="hours after the first submission when ci joins")
    parser.add_argument("--out", type=Path, help="write results.json, placements.jsonl and the plots here")
    parser.add_argument("--limit", type=int, help="only the first N jobs (a quick look; the floors are for the whole trace)")
    args = parser.parse_args()

    trace = scale_capacity(load_trace(TRACE), args.capacity_scale)
    if args.limit:
        trace = msgspec.structs.replace(trace, jobs=trace.jobs[: args.limit])
    first = trace.jobs[0].submit_ms if trace.jobs else 0
    trace = teams(trace, join_ms=first + round(args.join_h * 3_600_000))
    gpus = trace.total_capacity(trace.gpu_resource) / 1000
    print(
        f"trace {TRACE.name}: {len(trace.jobs)} jobs, {len(trace.clusters)} clusters, {gpus:.1f} GPUs "
        f"(--capacity-scale {args.capacity_scale}); profile {args.profile}; queues {QUEUES.relative_to(ROOT)}, "
        f"{LATE} joins at {args.join_h:g} h"
    )
    base_run, base_cpu = run(trace, args.profile, queues=False)
    queues_run, q_cpu = run(trace, args.profile, queues=True)
    base, with_q = base_run.results, queues_run.results
    if args.out is not None:
        from reconciler.simulate.plots import write_plots

        runs = [base_run, queues_run]
        write_outputs(args.out, doc=results_document(trace, runs), runs=runs)
        write_plots(args.out, runs)
    print(f"without queues: {base_cpu:.1f} s CPU; with queues: {q_cpu:.1f} s CPU")
    print()
    print(f"{'queue':<10} {'weight':>6} {'entitled':>8} {'achieved':>8} {'ratio':>6} {'p50 s':>9} {'p95 s':>10} "
          f"{'preempted':>9} {'starved':>7}  max usage / limit")
    for name, q in with_q["queues"].items():
        ratio = q["achieved_share"] / q["entitled_share"] if q["entitled_share"] else None
        usage = ", ".join(
            f"{k.split('/', 1)[1]} {v}/{fmt(q['limit'].get(k), 'd')}" for k, v in q["max_usage"].items()
        )
        print(
            f"{name:<10} {q['weight']:>6g} {fmt(q['entitled_share'], '.3f'):>8} {fmt(q['achieved_share'], '.3f'):>8} "
            f"{fmt(ratio, '.3f'):>6} {fmt(q['wait_p50_s'], '.0f'):>9} {fmt(q['wait_p95_s'], '.0f'):>10} "
            f"{q['preemptions']:>9} {q['starved']:>7}  {usage}"
        )
    print()
    for label, res in (("without queues", base), ("with queues", with_q)):
        print(
            f"{label:<15} GPU utilization {fmt(res['gpu_utilization'], '.3f')}, wait p50/p95 "
            f"{fmt(res['wait_p50_s'], '.0f')}/{fmt(res['wait_p95_s'], '.0f')} s, preemptions {res['preemptions']}, "
            f"unfinished {res['unfinished']}"
        )
    print(f"contended: {fmt(with_q['contended_fraction'], '.1%')} of the run ({fmt(with_q['contended_s'], '.0f')} s)")

    jain = with_q["jain_index"]
    over = {name: q["over_limit"] for name, q in with_q["queues"].items() if q["over_limit"]}
    own_ratio = (
        with_q["gpu_utilization"] / base["gpu_utilization"]
        if with_q["gpu_utilization"] is not None and base["gpu_utilization"]
        else None
    )
    # The floor compares the two runs over the same window: from the first submission to the
    # earlier of the two last finishes. Each run's own span ends with its last job, so one long
    # low-priority task that preemptions pushed late stretches the queued run's span and lowers its
    # mean, though the fleet was as busy while both had work (docs/tenancy.md).
    start, end = shared_window(base_run.recorder, queues_run.recorder)
    gpu_capacity = trace.total_capacity(trace.gpu_resource)
    base_shared, _ = utilization(base_run.recorder.gpu_steps, capacity=gpu_capacity, start_ms=start, end_ms=end)
    q_shared, _ = utilization(queues_run.recorder.gpu_steps, capacity=gpu_capacity, start_ms=start, end_ms=end)
    util_ratio = q_shared / base_shared if q_shared is not None and base_shared else None
    print(
        f"GPU utilization over the shared window ({(end - start) / 3_600_000:,.0f} h): without queues "
        f"{fmt(base_shared, '.3f')}, with queues {fmt(q_shared, '.3f')} ({fmt(util_ratio, '.3f')}x); "
        f"over each run's own span: {fmt(own_ratio, '.3f')}x"
    )
    starved = sum(q["starved"] for q in with_q["queues"].values())
    acts = with_q["newly_active"]
    worst_rounds = acts["preemption_rounds_max"]
    never = acts["never_reached"]
    print(
        f"newly active queues: {acts['count']} times ({acts['with_others_waiting']} while another queue waited); "
        f"at fair share after p50/p95/max {fmt(acts['reached_after_p50_s'], '.0f')}/"
        f"{fmt(acts['reached_after_p95_s'], '.0f')}/{fmt(acts['reached_after_max_s'], '.0f')} s; "
        f"preemption rounds max {worst_rounds}; never {never}"
    )
    late = acts["first"].get(LATE)
    if late is not None:
        print(
            f"  {LATE} joins at {late['at_s'] / 3600:.1f} h: at its fair share after {fmt(late['reached_after_s'], '.0f')} s, "
            f"{late['preemption_rounds']} preemption round(s)"
        )
    for a in acts["slowest"][:3]:
        print(
            f"  slowest: {a['queue']} at {a['at_s'] / 3600:.1f} h: {fmt(a['reached_after_s'], '.0f')} s, "
            f"{a['preemption_rounds']} round(s), another queue waiting: {a['others_waiting']}"
        )
    floors = [
        (f"Jain index {fmt(jain, '.3f')} >= {JAIN_FLOOR}", jain is not None and jain >= JAIN_FLOOR),
        (f"no queue above nominal + borrowingLimit ({over if over else 'none'})", not over),
        (
            f"GPU utilization {fmt(util_ratio, '.3f')}x the run without queues (shared window) >= {UTILIZATION_FLOOR}",
            util_ratio is not None and util_ratio >= UTILIZATION_FLOOR,
        ),
        (f"starvation {starved} == 0", starved == 0),
        (
            f"newly active queue at its fair share within {ROUNDS_FLOOR} preemption round "
            f"(max {worst_rounds}, never {never})",
            worst_rounds <= ROUNDS_FLOOR and never == 0,
        ),
    ]
    print()
    for text, ok in floors:
        print(f"floor {'MET    ' if ok else 'NOT MET'} {text}")
    met = sum(ok for _, ok in floors)
    print(
        f"tenancy: Jain {fmt(jain, '.3f')}, utilization {fmt(util_ratio, '.3f')}x, starvation {starved}, "
        f"rounds {worst_rounds}: {met}/{len(floors)} floors met"
    )
    return 0 if met == len(floors) else 1


if __name__ == "__main__":
    sys.exit(main())
