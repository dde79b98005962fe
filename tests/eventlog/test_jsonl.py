"""JSONL files as people hand them over: blank lines, a damaged line, a missing file."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import codec, jsonl
from eventlog import events as ev


def entry(seq: int) -> bytes:
    return codec.encode(ev.LogEntry(seq=seq, at_ms=seq * 10, event=ev.Tick(), leader="a"))


async def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n" + entry(1) + b"\n\n  \n" + entry(2) + b"\n" + entry(3))  # no final newline
    reader = jsonl.JsonlLog(path)
    assert [e.seq async for batch in reader.read() for e in batch] == [1, 2, 3]
    assert await reader.last_seq() == 3
    assert [e.seq async for batch in reader.read(until_ms=20) for e in batch] == [1, 2]


async def test_a_damaged_line_is_reported_with_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(entry(1) + b"\n" + b'{"seq":2,"at_ms":"soon","event":{"type":"Tick"}}\n')
    with pytest.raises(codec.DecodeError, match=r"log\.jsonl") as info:
        [e async for batch in jsonl.JsonlLog(path).read() for e in batch]
    assert info.value.path == "$.at_ms"


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        jsonl.JsonlLog(tmp_path / "nope.jsonl")
