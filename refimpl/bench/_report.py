"""How every benchmark suite ends: print its figures, and write them as JSON when asked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

__all__ = ["publish"]


def publish(report: dict, print_report: Callable[[dict], None],
            json_path: Path | None) -> dict:
    """Print `report` for people, write it to `json_path` if given; return it."""
    print_report(report)
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2))
    return report
