"""Simulated worker clusters: a pure model (no asyncio, no clock) driven in real or virtual time."""

from reconciler.sim.worker import CopyState, CopyView, SimWorker

__all__ = ["CopyState", "CopyView", "SimWorker"]
