"""A one-line progress bar on stderr for long runs, redrawn at most a few times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Callable as `bar(done, total, detail="")`; draws `label [#####     ] done/total detail
    elapsed` in place (for simulations, profiles, any loop that knows its length). The clock
    starts at the first call, so a bar made before other work does not count that work."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30,
                 interval_s: float = 0.2) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.interval_s = interval_s
        self._last_draw = -float("inf")
        self._start: float | None = None

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if done < total and now - self._last_draw < self.interval_s:
            return
        self._last_draw = now
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + " " * (self.width - filled)
        end = "\n" if done >= total else ""
        elapsed_s = now - self._start
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {detail:<28} "
                          f"{elapsed_s:6.1f} s{end}")
        self.stream.flush()
