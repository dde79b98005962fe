"""The registry type: plugin name -> plugin class, a value the core is handed, never a global.

The core compiles profiles against the registry it was given (``new_state(plugins=...)``); which
plugins exist is decided outside it: ``reconciler.core.plugins.BUILTINS`` holds ours, and the shell
(``reconciler.edge.plugins``) adds third-party ones found through entry points. Duplicate names
are an error. Arguments are validated (msgspec, unknown fields rejected) with field paths before
the first cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from reconciler.core.framework.interface import FilterPlugin, Plugin, ScorePlugin


class PluginError(ValueError):
    """A profile names an unknown plugin, a plugin of the wrong kind, or bad arguments."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class Registry:
    """Plugin classes by name, fixed when built (``Registry(classes)``; ``with_plugins`` makes
    another): a registry that changed under a running core would make replay depend on when."""

    def __init__(self, plugins: Iterable[type[Plugin]] = ()) -> None:
        self._plugins: dict[str, type[Plugin]] = {}
        for plugin in plugins:
            if not plugin.name:
                raise PluginError(f"{plugin.__qualname__} has no name", path="registry")
            if plugin.name in self._plugins and self._plugins[plugin.name] is not plugin:
                raise PluginError(f"duplicate plugin name {plugin.name!r}", path="registry")
            self._plugins[plugin.name] = plugin

    def with_plugins(self, plugins: Iterable[type[Plugin]]) -> Registry:
        """A new registry with these plugins added (this one is left as it was)."""
        return Registry([*self._plugins.values(), *plugins])

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def __contains__(self, name: object) -> bool:
        return name in self._plugins

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
