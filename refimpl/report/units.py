"""Human-readable quantities: bytes in binary units, rates in decimal SI units."""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_count", "format_rate", "format_seconds", "format_spread"]


def format_bytes(num_bytes: float) -> str:
    """`1536` -> '1.5 KiB' (powers of 1024, as cache and memory sizes are quoted)."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_rate(per_second: float, unit: str) -> str:
    """`2.039e12, 'B/s'` -> '2.04 TB/s' (powers of 1000, as bandwidth and FLOP/s are quoted)."""
    value = float(per_second)
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(value) < 1000 or prefix == "P":
            return f"{value:.3g} {prefix}{unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_seconds(seconds: float) -> str:
    """`0.00042` -> '420 us'; seconds in the unit that gives 1-999."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(seconds) >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}"
    raise AssertionError("unreachable")


def format_spread(share: float) -> str:
    """A profile's round-to-round spread: `0.023` -> '2.3 %'; NaN (one round) -> 'one round'."""
    return "one round" if math.isnan(share) else f"{100 * share:.1f} %"


def format_count(count: float) -> str:
    """`6_738_415_616` -> '6.74B' (parameter counts as models are named)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= scale:
            return f"{count / scale:.3g}{suffix}"
    return f"{count:.0f}"
