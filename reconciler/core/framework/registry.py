"""One registry: plugin name -> factory. Duplicate names are an error.

Built-in plugins register at import; third-party ones are found through the ``kdispatch.plugins``
entry-point group (each entry point names a ``Plugin`` subclass) and get exactly the same
interface. Arguments are validated (msgspec, unknown fields rejected) with field paths before the
first cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

import msgspec

from reconciler.core.framework.interface import FilterPlugin, Plugin, ScorePlugin

ENTRY_POINT_GROUP = "kdispatch.plugins"


class PluginError(ValueError):
    """A profile names an unknown plugin, a plugin of the wrong kind, or bad arguments."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


Factory = Callable[[Any], Plugin]


class Registry:
    def __init__(self) -> None:
        self._plugins: dict[str, type[Plugin]] = {}

    def register(self, plugin: type[Plugin]) -> type[Plugin]:
        if not plugin.name:
            raise PluginError(f"{plugin.__qualname__} has no name", path="registry")
        if plugin.name in self._plugins and self._plugins[plugin.name] is not plugin:
            raise PluginError(f"duplicate plugin name {plugin.name!r}", path="registry")
        self._plugins[plugin.name] = plugin
        return plugin

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def get(self, name: str, *, path: str) -> type[Plugin]:
        plugin = self._plugins.get(name)
        if plugin is None:
            known = ", ".join(self.names())
            raise PluginError(f"unknown plugin {name!r} (known: {known})", path=path)
        return plugin

    def build_filter(self, name: str, args: dict[str, Any], *, path: str) -> FilterPlugin:
        plugin = self.build(name, args, path=path)
        if not isinstance(plugin, FilterPlugin):
            raise PluginError(f"{name} is not a filter plugin", path=path)
        return plugin

    def build_score(self, name: str, args: dict[str, Any], *, path: str) -> ScorePlugin:
        plugin = self.build(name, args, path=path)
        if not isinstance(plugin, ScorePlugin):
            raise PluginError(f"{name} is not a score plugin", path=path)
        return plugin

    def build(self, name: str, args: dict[str, Any], *, path: str) -> Plugin:
        cls = self.get(name, path=f"{path}.name")
        if cls.Args is None:
            if args:
                raise PluginError(f"{name} takes no arguments", path=f"{path}.args")
            return cls(None)
        try:
            typed = msgspec.convert(args, cls.Args)
        except msgspec.ValidationError as err:
            text = str(err)
            where = text.rsplit(" - at `$", 1)[1].rstrip("`") if " - at `$" in text else ""
            raise PluginError(text.split(" - at `")[0], path=f"{path}.args{where}") from None
        return cls(typed)


REGISTRY = Registry()
_loaded_groups: list[str] = []


def register(plugin: type[Plugin]) -> type[Plugin]:
    """Class decorator for built-in plugins."""
    return REGISTRY.register(plugin)


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Register third-party plugins once; returns their names (for logs and docs)."""
    if group in _loaded_groups:
        return []
    _loaded_groups.append(group)
    loaded = []
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
        plugin = ep.load()
        if not (isinstance(plugin, type) and issubclass(plugin, (FilterPlugin, ScorePlugin))):
            raise PluginError(f"entry point {ep.value} is not a FilterPlugin/ScorePlugin subclass", path=ep.name)
        REGISTRY.register(plugin)
        loaded.append(plugin.name)
    return loaded
