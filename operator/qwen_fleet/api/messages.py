"""A pydantic validation error in one line, as the Stalled condition, the Event and `qwen-fleet render` say it."""

from __future__ import annotations

from pydantic import ValidationError


def validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        msg = str(e.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
