"""Which plugins this environment has: the built-in ones plus third-party ones found through the
``kdispatch.plugins`` entry-point group, each with the distribution and version it came from.

Discovery reads the installed packages, so it happens here in the shell, once per process
(``installed()``), at the start of every command that builds profiles; the core only ever sees
the resulting ``Registry``. The provenance goes into the log with the policy (``stamp``) and
replay compares it with what it finds (``check``), so a log replayed where a plugin is missing or
is another version says which one and what to install instead of reporting a mismatch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

import msgspec

from eventlog import events as ev
from reconciler import core
from reconciler.core.framework.interface import FilterPlugin, Plugin, ScorePlugin

ENTRY_POINT_GROUP = "kdispatch.plugins"
DISTRIBUTION = "kdispatch"


class PluginDiscoveryError(Exception):
    """An entry point of the group that cannot be used (fails to import, is not a plugin class,
    or reuses a name): refusing to start beats running without a plugin the policy may need."""


@dataclass(frozen=True)
class PluginSet:
    """The plugins of this environment: the registry the core compiles against, and where each
    plugin came from (``refs``, by name)."""

    registry: core.Registry
    refs: Mapping[str, ev.PluginRef] = field(default_factory=dict)

    def stamp(self, policy: ev.PolicyLoaded) -> ev.PolicyLoaded:
        """The policy as the leader records it: with the provenance of every plugin it uses."""
        used = core.plugins_used(policy)
        return msgspec.structs.replace(policy, plugins=[self.refs[n] for n in used if n in self.refs])

    def third_party(self) -> list[ev.PluginRef]:
        return [r for _, r in sorted(self.refs.items()) if not r.builtin]


def kdispatch_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "builtin"


def builtin_set() -> PluginSet:
    version = kdispatch_version()
    refs = {
        name: ev.PluginRef(name=name, distribution=DISTRIBUTION, version=version, builtin=True)
        for name in core.BUILTINS.names()
    }
    return PluginSet(registry=core.BUILTINS, refs=refs)


def discover(group: str = ENTRY_POINT_GROUP) -> PluginSet:
    """Built-in plugins plus every entry point of ``group`` (in name order, so the outcome does
    not depend on the order packages were installed in)."""
    base = builtin_set()
    refs = dict(base.refs)
    found: list[type[Plugin]] = []
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = ep.dist
        ref = ev.PluginRef(
            name=ep.name,
            distribution=dist.name if dist is not None else "(unknown distribution)",
            version=dist.version if dist is not None else "(unknown version)",
        )
        where = f"entry point {ep.name} = {ep.value} of {ref.distribution} {ref.version} (group {group})"
        try:
            plugin = ep.load()
        except Exception as err:
            raise PluginDiscoveryError(f"{where} cannot be loaded: {type(err).__name__}: {err}") from None
        if not (isinstance(plugin, type) and issubclass(plugin, (FilterPlugin, ScorePlugin))):
            raise PluginDiscoveryError(f"{where} is not a FilterPlugin or ScorePlugin subclass")
        if not plugin.name:
            raise PluginDiscoveryError(f"{where}: {plugin.__qualname__} sets no name")
        if plugin.name in refs:
            other = refs[plugin.name]
            owner = "a built-in plugin" if other.builtin else f"the plugin of {other.distribution} {other.version}"
            raise PluginDiscoveryError(f"{where}: the name {plugin.name!r} is already {owner}")
        refs[plugin.name] = msgspec.structs.replace(ref, name=plugin.name)
        found.append(plugin)
    return PluginSet(registry=base.registry.with_plugins(found), refs=refs)


@functools.cache
def installed() -> PluginSet:
    """This process's plugins, discovered on first use; commands call it at start-up so a broken
    plugin stops them before they read or write anything."""
    return discover()


# ---------------------------------------------------------------------------------------------
# Comparing a recorded policy's plugins with this environment's
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginProblem:
    """A plugin the log's policy uses that is missing here or is not the one the log recorded."""

    name: str
    profiles: list[str]
    recorded: ev.PluginRef | None  # None: not among the plugins the log records
    found: ev.PluginRef | None  # None: not installed here
    log_records_plugins: bool = True  # False: a log from before plugins were recorded

    def describe(self) -> str:
        used_by = ", ".join(self.profiles)
        head = f"plugin {self.name} (used by profile{'s' if len(self.profiles) > 1 else ''} {used_by})"
        if self.recorded is not None:
            then = f"the log was written with {_origin(self.recorded)}"
        elif self.log_records_plugins:
            then = "the leader that wrote the log had no such plugin (profiles using it could not run)"
        else:
            then = "the log predates recording plugins, so it was written with a built-in one"
        now = "it is not installed here" if self.found is None else f"here it is {_origin(self.found)}"
        return f"{head}: {then}; {now}"

    def remedy(self) -> str:
        r, found = self.recorded, self.found
        if r is None and self.log_records_plugins:
            if found is not None and not found.builtin:
                return f"pip uninstall {found.distribution}"
            return "use the kdispatch that wrote the log"
        if r is None or r.builtin:
            version = r.version if r is not None and r.version != "builtin" else None
            return f"use kdispatch {version}" if version else "use the kdispatch that wrote the log"
        if found is not None and found.builtin:
            return f"use a kdispatch without a built-in {self.name}, with {r.distribution}=={r.version} installed"
        return f"pip install '{r.distribution}=={r.version}'"

    def as_json(self) -> dict[str, object]:
        return {
            "plugin": self.name,
            "profiles": self.profiles,
            "recorded": msgspec.to_builtins(self.recorded),
            "found": msgspec.to_builtins(self.found),
            "message": self.describe(),
            "remedy": self.remedy(),
        }


def _origin(ref: ev.PluginRef) -> str:
    if ref.builtin:
        return f"the built-in one (kdispatch {ref.version})"
    return f"{ref.distribution} {ref.version}"


def check(policy: ev.PolicyLoaded | None, plugins: PluginSet) -> list[PluginProblem]:
    """Problems with the plugins ``policy`` uses, as recorded in it, against ``plugins``.

    A log that records no plugins was written before they were recorded: its plugins are taken to
    be built-in ones. Built-in plugins of another kdispatch version are not a problem here: that
    is what ``replay --verify`` itself is for.
    """
    recorded = {r.name: r for r in policy.plugins} if policy is not None and policy.plugins is not None else None
    problems: list[PluginProblem] = []
    for name, profiles in core.plugins_used(policy).items():
        found = plugins.refs.get(name)
        want = recorded.get(name) if recorded is not None else None
        if recorded is not None and want is None:
            # The leader had no such plugin either (its profiles failed to compile the same way).
            ok = found is None
        elif want is None or want.builtin:
            ok = found is not None and found.builtin
        else:
            ok = found is not None and (found.distribution, found.version, found.builtin) == (
                want.distribution,
                want.version,
                want.builtin,
            )
        if not ok:
            problems.append(
                PluginProblem(
                    name=name, profiles=profiles, recorded=want, found=found, log_records_plugins=recorded is not None
                )
            )
    return problems


def warning_lines(command: str, problems: Iterable[tuple[int, PluginProblem]]) -> list[str]:
    """For stderr: the state or explanations a command prints come from other plugins than the
    log's (one line per plugin, with the seq of the policy that uses it)."""
    return [
        f"kdispatch {command}: warning: {p.describe()} (policy in force at seq {seq}); to replay this log: {p.remedy()}"
        for seq, p in problems
    ]
