"""Resource names <-> array columns. Columns are appended in first-seen order, never reordered."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from eventlog.events import Resources

Vec = npt.NDArray[np.int64]


class ResourceIndex:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str) -> bool:
        """Register a resource; True if it is new (arrays must grow a column)."""
        if name in self.index:
            return False
        self.index[name] = len(self.names)
        self.names.append(name)
        return True

    def vector(self, amounts: Resources) -> Vec:
        """Amounts as a row; resources never seen get no column (callers add them first)."""
        out = np.zeros(len(self.names), dtype=np.int64)
        for name, value in amounts.items():
            col = self.index.get(name)
            if col is not None:
                out[col] = value
        return out

    def as_dict(self, row: Vec) -> Resources:
        return {name: int(row[i]) for i, name in enumerate(self.names) if row[i]}
