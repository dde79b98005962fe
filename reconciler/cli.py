"""``kdispatch``: one entry point, one module per subcommand under ``reconciler.commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (sync) or ``async def run_async(args) -> int``. Adding a command is adding a
module and its name to ``COMMANDS``; nothing else here changes.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

COMMANDS = ("serve", "demo", "log", "replay", "explain", "status", "queue", "simulate")


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"reconciler.commands.{name}")
    except ModuleNotFoundError as err:
        if err.name == f"reconciler.commands.{name}":
            return None
        raise


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    parser = argparse.ArgumentParser(
        prog="kdispatch",
        description="Multi-cluster dispatcher for Kubernetes batch jobs, event-sourced on NATS JetStream.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, ModuleType] = {}
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        modules[name] = module
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module = modules[args.command]
    try:
        if hasattr(module, "run_async"):
            code: int = asyncio.run(module.run_async(args))
        else:
            code = module.run(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
