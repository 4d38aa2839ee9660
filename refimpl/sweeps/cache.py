"""The on-disk cache of finished cells: one run report per cell key, written whole or not at all.

`DIR/runs/<key>.json` is both the cell's per-run JSON report (refimpl.metrics.report's layout)
and its cache entry; `<key>.requests.parquet` beside it holds its request records where a
sweep asked for them. Each file is written under a temporary name and renamed into place, so
a sweep killed at any moment leaves only whole entries, and a resumed one redoes only the
cells whose entry is missing (or unreadable, or lacks the request file it now needs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from refimpl.export.requests import request_columns
from refimpl.export.tables import write_table
from refimpl.metrics.report import json_ready
from refimpl.sweeps.work import CellResult

__all__ = ["CellCache"]


class CellCache:
    """Finished cells under `folder/runs`, keyed by `Cell.key()`."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder) / "runs"

    def report_path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def requests_path(self, key: str) -> Path:
        return self.folder / f"{key}.requests.parquet"

    def load(self, key: str, with_requests: bool = False) -> dict | None:
        """The cell's saved report, or None when it must be (re)run."""
        if with_requests and not self.requests_path(key).is_file():
            return None
        try:
            report = json.loads(self.report_path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # missing, or damaged by hand: run it again
            return None
        return report if report.get("settings", {}).get("key") == key else None

    def store(self, result: CellResult) -> Path:
        """Save a finished cell (its request records first: the report marks it done)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if result.requests is not None:
            write_table(request_columns(result.requests), self.requests_path(result.key))
        path = self.report_path(result.key)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        text = json.dumps(json_ready(result.report), indent=2, sort_keys=True, allow_nan=False)
        partial.write_text(text + "\n", encoding="utf-8")
        os.replace(partial, path)
        return path
