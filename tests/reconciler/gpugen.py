"""A third-party plugin as another distribution (``kd-gpugen``) would ship it, and a way to make it
"installed": a ``.dist-info`` directory whose entry point names the class below, to put on the
path. For the tests of plugin discovery and of replay where the plugin is missing or another
version.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from eventlog import events as ev
from reconciler.core import DEFAULT_PROFILE
from reconciler.core.framework.interface import CycleInput, FilterPlugin, FilterResult, Slots
from reconciler.core.framework.status import Code, Reason

DISTRIBUTION = "kd-gpugen"


class Args(msgspec.Struct, forbid_unknown_fields=True):
    minimum: int = 0


class GpuGeneration(FilterPlugin):
    """Only clusters whose label gpu-gen is at least ``minimum``."""

    name = "GpuGeneration"
    Args = Args
    static = True

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        gen = inp.clusters.label("gpu-gen").numeric[slots]
        with np.errstate(invalid="ignore"):
            ok = gen >= self.args.minimum
        return FilterResult.from_mask(ok, Reason(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "gpu generation too old"))


# The default profile, and only clusters of GPU generation 4 or newer.
PROFILE = msgspec.structs.replace(
    DEFAULT_PROFILE, filters=[*DEFAULT_PROFILE.filters, ev.FilterSpec(name="GpuGeneration", args={"minimum": 4})]
)


def install(where: Path, *, version: str, target: str = f"{__name__}:GpuGeneration") -> Path:
    """Write the distribution's metadata into ``where`` (put it on the path to install it)."""
    dist = where / f"kd_gpugen-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[kdispatch.plugins]\nGpuGeneration = {target}\n")
    return where
