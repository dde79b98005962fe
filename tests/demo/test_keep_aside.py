"""A demo never deletes the previous demo's log: it is renamed, with a name that is free."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import pytest

from reconciler.demo.run import DemoError, keep_aside, prepare_data_dir

NOON = calendar.timegm(time.strptime("2026-11-24 12:00:00", "%Y-%m-%d %H:%M:%S"))


def _old_demo(path: Path, text: str) -> None:
    path.mkdir()
    (path / "demo-config.yaml").write_text("# Written by `kdispatch demo`.\n")
    (path / "log").write_text(text)


def test_the_previous_demo_is_renamed_with_its_time_and_a_fresh_dir_made(tmp_path: Path) -> None:
    data = tmp_path / ".kdispatch"
    _old_demo(data, "first")
    kept = prepare_data_dir(data, now=NOON)
    assert kept == tmp_path / ".kdispatch.prev-20261124T120000Z"
    assert (kept / "log").read_text() == "first"
    assert data.is_dir() and not any(data.iterdir())


def test_two_in_the_same_second_do_not_collide(tmp_path: Path) -> None:
    data = tmp_path / "d"
    _old_demo(data, "first")
    a = keep_aside(data, now=NOON)
    _old_demo(data, "second")
    b = keep_aside(data, now=NOON)
    assert a != b and b.name == "d.prev-20261124T120000Z-2"
    assert (a / "log").read_text() == "first" and (b / "log").read_text() == "second"


def test_nothing_is_kept_when_there_was_nothing(tmp_path: Path) -> None:
    assert prepare_data_dir(tmp_path / "new") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_data_dir(empty) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]


def test_a_dir_the_demo_did_not_make_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("x")
    with pytest.raises(DemoError, match="was not made by `kdispatch demo`"):
        prepare_data_dir(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "x"
