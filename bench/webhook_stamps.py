"""Benchmark: what writing the pod sets and priority onto the object costs ``/mutate``.

    .venv/bin/python bench/webhook_stamps.py [--calls 20000] [--rounds 5]

The pure admission decision (``webhook.admit.mutate``, no HTTP, no TLS) on real captured reviews
from the corpus (CREATE of a Job, JobSet, PyTorchJob or RayJob; opted in), side by side in one process:
as shipped (placement, pod sets with their quantities, priority, hold) and a baseline with the
stamps switched off (what /mutate did before: shape only, quantities read once at /validate).
Rounds alternate so both see the same machine. Prints per-call p50/p99 of each and the ratio; the
last line is the headline: the added CPU per /mutate call, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.edge.percentile import percentile  # noqa: E402
from webhook import admit  # noqa: E402
from webhook.review import AdmissionRequest, decode_review  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "data" / "admissionreview"


def _requests() -> list[AdmissionRequest]:
    out = []
    for path in sorted(CORPUS.glob("*.json")):
        raw = json.loads(path.read_bytes())
        req = raw.get("request", raw) if isinstance(raw, dict) else None
        if not isinstance(req, dict) or not isinstance(req.get("object"), dict):
            continue
        kind = (req.get("kind") or {}).get("kind")
        if kind not in ("Job", "JobSet", "PyTorchJob", "RayJob") or req.get("operation") != "CREATE":
            continue
        meta = req["object"].setdefault("metadata", {})
        meta.setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "q"
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
        try:
            parsed = decode_review(json.dumps(review).encode())[1]
        except Exception:
            continue
        if admit.mutate(parsed, admit.Settings()).allowed:
            out.append(parsed)
    return out


def _round(requests: list[AdmissionRequest], calls: int) -> list[float]:
    settings = admit.Settings()
    times = []
    clock = time.perf_counter_ns
    for i in range(calls):
        request = requests[i % len(requests)]
        t = clock()
        admit.mutate(request, settings)
        times.append((clock() - t) / 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    requests = _requests()
    kinds = sorted({r.kind.kind for r in requests})
    print(f"{len(requests)} corpus reviews ({', '.join(kinds)}), {args.rounds} rounds of {args.calls} calls")
    shipped = admit._stamps
    baseline: Any = lambda *a, **k: {}  # noqa: E731
    results: dict[str, list[float]] = {"baseline": [], "stamps": []}
    for _ in range(args.rounds):
        for name, stamps in (("baseline", baseline), ("stamps", shipped)):
            admit._stamps = stamps  # type: ignore[assignment]
            results[name] += _round(requests, args.calls)
    admit._stamps = shipped  # type: ignore[assignment]
    for name, times in results.items():
        print(
            f"{name:9s} p50 {percentile(times, 50):6.1f} us  p99 {percentile(times, 99):6.1f} us  mean {statistics.fmean(times):6.1f} us"
        )
    base, with_stamps = statistics.median(results["baseline"]), statistics.median(results["stamps"])
    print(f"ratio stamps/baseline (p50) {with_stamps / base:.2f}")
    print(f"pod-sets + priority annotations add {with_stamps - base:.1f} us per /mutate call (p50)")


if __name__ == "__main__":
    main()
