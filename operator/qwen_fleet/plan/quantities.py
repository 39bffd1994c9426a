"""Kubernetes quantities: parse them, and write computed sizes exactly (largest binary suffix)."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

GiB = 1024**3
_BINARY = (("Ei", 1024**6), ("Pi", 1024**5), ("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024))


def parse(value: int | str) -> Decimal:
    """A quantity as a number (bytes for memory, cores for CPU)."""
    return Decimal(parse_quantity(value))


def format_bytes(value: Decimal | int) -> str:
    """Whole bytes with the largest binary suffix that keeps them exact, e.g. 4294967296 -> '4Gi'."""
    amount = int(Decimal(value).to_integral_value(rounding="ROUND_CEILING"))
    for suffix, size in _BINARY:
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)
