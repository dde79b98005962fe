"""How bench/soak.py judges RSS growth: on the longest stretch of one process doing one job."""

from __future__ import annotations

from bench import soak


def samples(pid: int, role: str, start: float, kbs: list[int]) -> list[tuple[float, int, int, str]]:
    return [(start + 5 * i, pid, kb, role) for i, kb in enumerate(kbs)]


def never_warming(born: float) -> float:
    return born


def test_a_standby_taking_over_is_a_new_stretch_and_the_longer_one_is_judged() -> None:
    standby = samples(1, "standby", 0, [100_000] * 30)
    # Taking the lead costs memory once (a step at the start of the stretch), then stays flat.
    leading = samples(1, "leader", 150, [130_000] + [140_000] * 12)
    growth, how = soak.rss_growth(standby + leading, half_at=0, warmed_up=never_warming)
    assert growth == 0.0 and "standby" in how and "pid 1" in how
    assert [len(s) for s in soak.stretches(standby + leading)] == [30, 13]


def test_growth_within_one_stretch_fails_the_limit() -> None:
    leaking = samples(7, "leader", 0, [100_000 + 1_000 * i for i in range(40)])
    growth, _ = soak.rss_growth(leaking, half_at=0, warmed_up=never_warming)
    assert growth is not None and growth > 0.05


def test_only_the_last_half_after_warm_up_counts() -> None:
    # Growing while it warms up, flat afterwards: judged flat.
    run = samples(3, "", 0, [50_000 + 2_000 * i for i in range(20)] + [90_000] * 20)
    growth, _ = soak.rss_growth(run, half_at=0, warmed_up=lambda born: born + 100)
    assert growth == 0.0
    # Too short a stretch after the half: no verdict rather than one from a few samples.
    growth, how = soak.rss_growth(run, half_at=180, warmed_up=never_warming)
    assert growth is None and "10 samples" in how
