"""Reading the CSV files of a trace: errors name the file, the line and what the file should hold.

The files are read whole (traces are megabytes, not gigabytes) so that a byte that is not UTF-8
is reported by its line before any row is used, instead of a ``UnicodeDecodeError`` halfway.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from reconciler.config import ConfigError, read_text
from reconciler.simulate.trace import TraceError


def open_csv(path: Path, *, expected: str) -> csv.DictReader[str]:
    """A ``DictReader`` over ``path``; ``expected`` says what the file should be, for errors."""
    try:
        text = read_text(path, expected=expected)
    except ConfigError as err:
        raise TraceError(str(err)) from None
    return csv.DictReader(io.StringIO(text, newline=""))


def rows(reader: csv.DictReader[str], path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows with the line each ends on (blank lines and quoted newlines counted)."""
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as err:
        raise TraceError(f"{path}:{reader.line_num}: not valid CSV: {err}") from None


def missing_columns(reader: csv.DictReader[str], path: Path, required: tuple[str, ...], *, expected: str) -> None:
    try:
        found = list(reader.fieldnames or [])
    except csv.Error as err:
        raise TraceError(f"{path}:1: not valid CSV: {err}") from None
    missing = [c for c in required if c not in found]
    if missing:
        raise TraceError(f"{path}:1: missing columns {missing} in the header {found}; expected {expected}")
