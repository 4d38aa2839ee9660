"""SLO sets: which classes of requests a run serves, and what share of the requests each gets.

A set is written `NAME:SHARE,...` over the SLO presets (`interactive:0.3,batch:0.7`), or named
(`SLO_SETS`, e.g. `chat-batch`); `one_class(NAME)` is the set of one preset for every request.
Shares are relative (normalised to sum to 1). Priorities follow tightness, not the order
written: the class with the shortest TTFT target is priority 0, ties broken by the shorter
TPOT target, and classes with identical targets share a priority; so `batch:0.7,interactive:0.3`
is the same set as `interactive:0.3,batch:0.7`. Every class has weight 1.0: a request that
meets its SLO counts the same in any class, as goodput counts it. Requests are given their
class by `refimpl.workloads.assign_slo_set` (seeded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from refimpl.config.slo import SLO, SLO_PRESETS, PriorityClass
from refimpl.errors import ConfigError

__all__ = ["SLO_SETS", "SLOSet", "one_class", "slo_set"]

_EXAMPLE = "e.g. interactive:0.3,batch:0.7"


@dataclass(frozen=True)
class SLOSet:
    """Priority classes and the share of requests each gets (shares sum to 1)."""

    name: str  # the set's name, or the spec it was parsed from
    classes: tuple[PriorityClass, ...]
    shares: tuple[float, ...]  # one per class, each > 0, summing to 1

    def __post_init__(self) -> None:
        if not self.classes or len(self.shares) != len(self.classes):
            raise ConfigError("shares", self.shares, f"need one share per class "
                              f"({len(self.classes)}), and at least one class")
        if not math.isclose(sum(self.shares), 1.0) or min(self.shares) <= 0:
            raise ConfigError("shares", self.shares, "must be above 0 and sum to 1")

    @property
    def spec(self) -> str:
        """`NAME:SHARE,...`, which `slo_set` parses back into the same classes and shares."""
        # repr: the shortest text that reads back as the same float, so the set round-trips.
        return ",".join(f"{c.name}:{share!r}" for c, share in zip(self.classes, self.shares,
                                                                  strict=True))

    def describe(self) -> dict:
        """The set as plain data for reports: its name, spec and each class's targets."""
        return {"name": self.name, "spec": self.spec, "classes": [
            {"name": c.name, "priority": c.priority, "ttft_s": c.slo.ttft_s,
             "tpot_s": c.slo.tpot_s, "weight": c.weight, "share": share}
            for c, share in zip(self.classes, self.shares, strict=True)]}


# Named sets. `chat-batch` is the even interactive/batch mix of `refimpl bench serving`; the
# MLPerf pairs put each benchmark's interactive and server limits (slo.py) side by side.
SLO_SETS: dict[str, str] = {
    "chat-batch": "interactive:0.5,batch:0.5",
    "mlperf-llama3.1-8b-mix": "mlperf-llama3.1-8b-interactive:0.5,mlperf-llama3.1-8b:0.5",
    "mlperf-llama2-70b-mix": "mlperf-llama2-70b-interactive:0.5,mlperf-llama2-70b:0.5",
}


def _preset(field: str, name: str, where: str | None = None) -> SLO:
    """The SLO preset `name`; an unknown name is an error on `field`."""
    if name not in SLO_PRESETS:
        raise ConfigError(field, name, "unknown SLO preset", choices=SLO_PRESETS, where=where)
    return SLO_PRESETS[name]


def _share(text: str, where: str) -> float:
    """The share `text` says: a finite number above 0."""
    try:
        share = float(text)
    except ValueError:
        raise ConfigError("share", text, "must be a number", where=where) from None
    if not math.isfinite(share) or share <= 0:
        raise ConfigError("share", text, "must be a finite number above 0", where=where)
    return share


def _build(name: str, shares_by_class: dict[str, float]) -> SLOSet:
    """The set of these presets and relative shares, priorities ranked by tightness."""
    targets = {n: (SLO_PRESETS[n].ttft_s, SLO_PRESETS[n].tpot_s) for n in shares_by_class}
    rank = {t: i for i, t in enumerate(sorted(set(targets.values())))}  # tightest first
    total = sum(shares_by_class.values())
    classes = tuple(PriorityClass(n, rank[targets[n]], SLO_PRESETS[n]) for n in shares_by_class)
    return SLOSet(name, classes, tuple(s / total for s in shares_by_class.values()))


def one_class(name: str) -> SLOSet:
    """Every request in the one SLO preset `name` (what `--slo NAME` means)."""
    _preset("slo", name)
    return _build(name, {name: 1.0})


def slo_set(spec: str) -> SLOSet:
    """A named set (`SLO_SETS`) or a `NAME:SHARE,...` spec over the SLO presets."""
    if not isinstance(spec, str):
        raise ConfigError("classes", spec, f"must be NAME:SHARE pairs, {_EXAMPLE}")
    name, spec = spec.strip(), SLO_SETS.get(spec.strip(), spec)
    shares: dict[str, float] = {}
    where = f"SLO set {spec!r}"
    for entry in (part.strip() for part in spec.split(",")):
        if entry.count(":") != 1:
            raise ConfigError("classes", entry or spec, f"expected NAME:SHARE ({_EXAMPLE}) or "
                              "a named set", choices=SLO_SETS)
        class_name, text = (part.strip() for part in entry.split(":"))
        _preset("classes", class_name, where=where)
        if class_name in shares:
            raise ConfigError("classes", class_name, "named twice", where=where)
        shares[class_name] = _share(text, where)
    return _build(name, shares)
