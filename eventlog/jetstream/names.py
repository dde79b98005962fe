"""Stream, bucket and subject names of one kdispatch log, derived from one root token.

The default root ``kd`` gives the documented layout (``kd.in.>`` in stream ``KD_INBOX``,
``kd.log.>`` in ``KD_LOG``, KV bucket ``KD_LEASE``, object store ``KD_SNAPSHOTS``). Another root
gives a separate log on the same server: tests use one per test for isolation.
"""

from __future__ import annotations

import re

from msgspec import Struct

_ROOT = re.compile(r"^[A-Za-z0-9_-]+$")


class LogNames(Struct, frozen=True):
    root: str = "kd"

    def __post_init__(self) -> None:
        if not _ROOT.match(self.root):
            raise ValueError(f"log root {self.root!r} must be letters, digits, '_' or '-' (one NATS token)")

    @property
    def _upper(self) -> str:
        return self.root.upper().replace("-", "_")

    @property
    def inbox_stream(self) -> str:
        return f"{self._upper}_INBOX"

    @property
    def log_stream(self) -> str:
        return f"{self._upper}_LOG"

    @property
    def lease_bucket(self) -> str:
        return f"{self._upper}_LEASE"

    @property
    def snapshot_bucket(self) -> str:
        return f"{self._upper}_SNAPSHOTS"

    @property
    def inbox_prefix(self) -> str:
        return f"{self.root}.in"

    @property
    def log_prefix(self) -> str:
        return f"{self.root}.log"
