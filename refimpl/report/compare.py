"""Saved run reports side by side (`refimpl compare A.json B.json ...`), differences marked.

Each report (refimpl.metrics.report's layout, as `simulate --json`, `run --json`, `demo` and
every sweep cell write it) gives one column per policy in it. Each figure after the first
column shows its change against the first column, and a change of at least `threshold`
(5% by default) is marked `+` where it is better and `-` where it is worse (coloured green and
red on a terminal), which way being better depends on the figure (`HIGHER_IS_BETTER`). Below
the table, the settings that differ between the reports, since a difference in figures
means little without them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from refimpl.errors import ConfigError
from refimpl.metrics.table import COMPARISON_COLUMNS, render_columns

__all__ = ["HIGHER_IS_BETTER", "compare_reports", "format_compare", "load_reports"]

ROWS = COMPARISON_COLUMNS  # the figures compared: those of the side-by-side table
HIGHER_IS_BETTER = {"num_finished", "throughput_tok_s", "goodput_req_s", "slo_attainment"}
# Settings that vary between two runs of the same thing: not differences worth showing (a
# real run's compile and first-call seconds and its measured step profile among them).
_MEASURED_SETTINGS = {"compile_s", "wall_s", "key", "kernels_warm_up_s", "step_profile"}
_GREEN, _RED, _RESET = "\033[32m", "\033[31m", "\033[0m"


def load_reports(paths: Sequence[str | Path]) -> dict[str, dict]:
    """Each file's report, labelled by its name (its path, where two names are the same)."""
    if len(paths) < 1:
        raise ConfigError("reports", list(paths), "give at least one report to compare")
    names = [Path(p).stem for p in paths]
    labels = [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names, strict=True)]
    reports = {}
    for label, path in zip(labels, paths, strict=True):
        try:
            report = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise ConfigError("report", str(path), f"cannot be read ({error.strerror})") from None
        except ValueError:
            raise ConfigError("report", str(path), "is not JSON") from None
        if not isinstance(report, dict) or not isinstance(report.get("policies"), dict):
            raise ConfigError("report", str(path), "is not a refimpl run report (no "
                              "`policies`)")
        reports[label] = report
    return reports


def compare_reports(reports: dict[str, dict], threshold: float = 0.05) -> dict:
    """Columns (`label/policy`), the figures per column, each one's change against the first
    column and its verdict (`better`, `worse` or None below `threshold`), and the settings
    that differ."""
    columns = {(f"{label}/{policy}" if len(report["policies"]) > 1 or len(reports) == 1
                else label): summary
               for label, report in reports.items()
               for policy, summary in report["policies"].items()}
    first = next(iter(columns.values()))
    rows = []
    for title, key, fmt in ROWS:
        cells = []
        for summary in columns.values():
            value, base = summary.get(key), first.get(key)
            change = (value - base) / abs(base) if value is not None and base else None
            verdict = None
            if change is not None and abs(change) >= threshold:
                verdict = "better" if (change > 0) == (key in HIGHER_IS_BETTER) else "worse"
            cells.append({"value": value, "text": fmt(value), "change": change,
                          "verdict": verdict})
        rows.append({"title": title, "key": key, "cells": cells})
    return {"columns": list(columns), "rows": rows, "settings": _differing_settings(reports)}


def _differing_settings(reports: dict[str, dict]) -> dict[str, dict]:
    """Setting -> {label: value} for each setting whose value is not the same everywhere."""
    keys = sorted({k for r in reports.values() for k in r.get("settings", {})}
                  - _MEASURED_SETTINGS)
    differing = {}
    for key in keys:
        values = {label: r.get("settings", {}).get(key) for label, r in reports.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            differing[key] = values
    return differing


def format_compare(comparison: dict, color: bool = False) -> str:
    """The comparison as a text table (figures as rows, runs as columns) and the settings
    that differ."""
    header = ["", *comparison["columns"]]
    body = []
    for row in comparison["rows"]:
        line = [row["title"]]
        for k, cell in enumerate(row["cells"]):
            text = cell["text"]
            if k > 0 and cell["change"] is not None:
                mark = {"better": "+", "worse": "-", None: " "}[cell["verdict"]]
                text += f" ({100 * cell['change']:+.1f}%){mark}"
            line.append(text)
        body.append(line)
    table = render_columns(header, body)
    if color:  # after alignment: escape codes have no width on screen
        table = table.replace("%)+", f"%){_GREEN}+{_RESET}").replace("%)-", f"%){_RED}-{_RESET}")
    lines = [table]
    if comparison["settings"]:
        lines += ["", "settings that differ:"]
        for key, values in comparison["settings"].items():
            shown = ", ".join(f"{label}: {json.dumps(value)}" for label, value in values.items())
            lines.append(f"  {key}: {shown}")
    return "\n".join(lines)
