"""docs/architecture.md says exactly what the import-linter contracts in pyproject.toml say: its
contract table, contract for contract, and its room tables, row for row of the layers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _cells(line: str) -> list[str]:
    # A ``|`` escaped as ``\|`` (inside a layer) is not a column separator.
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _table(section: str) -> list[list[str]]:
    """The rows of the first Markdown table under the heading ``section`` (header excluded)."""
    text = DOC.read_text().split(section, 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(_cells(line))
        elif rows:
            break
    return [r for r in rows[1:] if not set("".join(r)) <= set("-")]


def _contract(name: str, kind: str, modules: str, rule: str) -> dict[str, Any]:
    kinds = [k.strip() for k in kind.split(",")]
    out: dict[str, Any] = {"name": name, "type": kinds[0]}
    if kinds[0] == "forbidden":
        out["source_modules"] = _names(modules)
        out["forbidden_modules"] = _names(rule)
        if "direct only" in kinds:
            out["allow_indirect_imports"] = True
        ignoring = [k for k in kinds if k.startswith("ignoring")]
        if ignoring:  # imports let through; none need exist yet, so no alert when none matches
            out["ignore_imports"] = [i.replace("`", "").strip() for i in ignoring[0][len("ignoring") :].split(";")]
            out["unmatched_ignore_imports_alerting"] = "none"
    elif kinds[0] == "independence":
        out["modules"] = _names(modules)
    elif kinds[0] == "layers":
        out["containers"] = _names(modules)
        out["layers"] = [_layer(layer) for layer in rule.split("→")]
        exhaustive = [k for k in kinds if k.startswith("exhaustive")]
        if exhaustive:
            out["exhaustive"] = True
            ignores = _names(exhaustive[0])
            if ignores:
                out["exhaustive_ignores"] = ignores
    return out


def _layer(cell: str) -> str:
    """``a`` ``|`` ``b`` as written in the doc -> ``a | b`` as written in pyproject.toml."""
    return cell.strip().replace("`", "")


def documented_contracts() -> list[dict[str, Any]]:
    return [_contract(*row) for row in _table("## The contracts")]


def configured_contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def _layers(contract_name: str) -> list[str]:
    (contract,) = [c for c in configured_contracts() if c["name"] == contract_name]
    return list(contract["layers"])


def _rows(section: str) -> list[str]:
    """A room table's rooms, grouped by row number, as a layer is written: ``a | b``."""
    rows: dict[str, list[str]] = {}
    for number, room, *_ in _table(section):
        rows.setdefault(number, []).extend(_names(room))
    return [" | ".join(rooms) for _, rooms in sorted(rows.items(), key=lambda kv: int(kv[0]))]


def test_the_contract_table_is_the_contracts_of_pyproject() -> None:
    assert documented_contracts() == configured_contracts()


def test_the_room_table_is_the_layers_of_reconciler() -> None:
    assert _rows("## The rooms of `reconciler`") == _layers("reconciler rooms")


def test_the_service_table_is_the_layers_of_the_service() -> None:
    assert _rows("### Inside `service`") == _layers("service rooms")
