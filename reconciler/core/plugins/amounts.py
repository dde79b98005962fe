"""Resource amounts as a person reads them in reasons ("8 nvidia.com/gpu", "4 cpu", "64Gi memory")."""

from __future__ import annotations

_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20))


def amount(resource: str, value: int, *, bare: bool = False) -> str:
    """``value`` in kdispatch's stored units (millicores for cpu, bytes for memory, else units);
    ``bare`` leaves out the resource name."""
    if resource == "cpu":
        text = f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    elif resource in ("memory", "ephemeral-storage") and value >= 1 << 20:
        text = str(value)
        for unit, size in _BINARY:
            if value >= size:
                whole, part = divmod(value, size)
                text = f"{whole}{unit}" if part == 0 else f"{value / size:.1f}{unit}"
                break
    else:
        text = str(value)
    return text if bare else f"{text} {resource}"
