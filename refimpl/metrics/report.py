"""The JSON report of a run: the settings it ran with and, per policy, its summary.

Layout: `{"refimpl_version", "settings": {...}, "policies": {name: {<summarize keys>,
"by_class": {class: {<request keys>}}}}}`; the metric keys are those of `summarize` (and
docs/metrics.md). Output is strict JSON (no NaN or Infinity: missing figures are null) with keys
sorted at every level, so the same run gives byte-identical files.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from refimpl._version import __version__
from refimpl.metrics.records import RequestRecords, StepRecords
from refimpl.metrics.summary import summarize, summarize_by_class

__all__ = ["build_report", "json_ready", "write_report"]


def json_ready(value: object) -> object:
    """`value` as plain JSON types: NumPy scalars and arrays unwrapped, NaN/inf -> None,
    paths -> str, dataclasses -> dicts, tuples -> lists, dict keys -> str."""
    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_ready(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def build_report(runs: dict[str, tuple[RequestRecords, StepRecords | None]],
                 settings: dict) -> dict:
    """The report dict: `settings` as given, and each policy's summary with its per-class one."""
    policies = {name: {**summarize(requests, steps), "by_class": summarize_by_class(requests)}
                for name, (requests, steps) in runs.items()}
    return json_ready({"refimpl_version": __version__, "settings": settings,
                       "policies": policies})


def write_report(report: dict, path: str | Path) -> Path:
    """Write `report` as strict JSON with sorted keys (folders created as needed); return path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # allow_nan=False: a NaN that slipped past json_ready is a bug, not a value to write.
    text = json.dumps(json_ready(report), indent=2, sort_keys=True, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path
