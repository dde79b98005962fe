"""The built-in filter and score plugins, assembled into the registry the core starts from.

Plugins depend on the framework (``reconciler.core.framework``), never the reverse: the framework
only learns of them through the ``Registry`` value it is handed.
"""

from __future__ import annotations

from reconciler.core.framework.interface import Plugin
from reconciler.core.framework.registry import Registry
from reconciler.core.plugins.affinity import ClusterAffinity, ClusterAffinityScore
from reconciler.core.plugins.capacity import BinPack, CapacityScore, ClusterFeasibility, ClusterHeadroom
from reconciler.core.plugins.gang import GangScore
from reconciler.core.plugins.health import ClusterHealth
from reconciler.core.plugins.locality import LocalityScore
from reconciler.core.plugins.nodefit import NodeFit
from reconciler.core.plugins.pinning import ClusterPinning
from reconciler.core.plugins.selector import ClusterSelector
from reconciler.core.plugins.taints import ClusterTaints, ClusterTaintScore
from reconciler.core.plugins.topology import TopologyFit, TopologyScore
from reconciler.core.plugins.workerqueue import WorkerQueueFit

BUILTIN_PLUGINS: tuple[type[Plugin], ...] = (
    ClusterHealth,
    ClusterPinning,
    ClusterSelector,
    ClusterAffinity,
    ClusterAffinityScore,
    ClusterTaints,
    ClusterTaintScore,
    ClusterFeasibility,
    ClusterHeadroom,
    CapacityScore,
    BinPack,
    LocalityScore,
    NodeFit,
    WorkerQueueFit,
    TopologyFit,
    TopologyScore,
    GangScore,
)

BUILTINS = Registry(BUILTIN_PLUGINS)
"""Every built-in plugin; the shell adds third-party ones to a copy (``with_plugins``)."""

__all__ = ["BUILTINS", "BUILTIN_PLUGINS"]
