"""Validation of hyper-parameters, with messages naming the owner, the value and the range."""

from __future__ import annotations

import math

from sonnx.errors import BadInputError


def number(owner: str, name: str, value: object) -> float:
    """A finite real number (bools are rejected: ``momentum=True`` is a mistake)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{owner}: {name} must be a number, received {value!r}")
    if not math.isfinite(value):
        raise BadInputError(f"{owner}: {name} must be finite, received {value!r}")
    return float(value)


def non_negative(owner: str, name: str, value: object) -> float:
    v = number(owner, name, value)
    if v < 0:
        raise BadInputError(f"{owner}: {name} must be >= 0, received {value!r}")
    return v


def in_unit_interval(owner: str, name: str, value: object, closed: bool = False) -> float:
    """A number in [0, 1) — or [0, 1] when ``closed``."""
    v = number(owner, name, value)
    if v < 0 or v > 1 or (v == 1 and not closed):
        interval = "[0, 1]" if closed else "[0, 1)"
        raise BadInputError(f"{owner}: {name} must be in {interval}, received {value!r}")
    return v


def positive_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInputError(f"{owner}: {name} must be a positive integer, received {value!r}")
    return value
