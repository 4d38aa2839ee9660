"""The progress bar: drawn in place, throttled, finished with a newline."""

from __future__ import annotations

import io

from refimpl.report import progress
from refimpl.report.progress import ProgressBar


def test_the_bar_fills_throttles_and_ends_its_line():
    stream = io.StringIO()
    bar = ProgressBar("run", stream=stream, width=10, interval_s=3600)
    bar(0, 4, "start")
    bar(1, 4, "skipped: drawn less than an interval ago")
    bar(4, 4, "done")
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 2  # the middle call was throttled; the last always draws
    assert frames[0].startswith("run [          ] 0/4 start")
    assert frames[1].startswith("run [##########] 4/4 done")
    assert frames[1].endswith(" s\n")


def test_the_clock_starts_at_the_first_call_not_when_the_bar_is_made(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    stream = io.StringIO()
    bar = ProgressBar("serve", stream=stream, width=4, interval_s=0.0)  # made at 100 s
    now[0] = 130.0  # other work (a profile) first
    bar(0, 2)
    now[0] = 131.5
    bar(2, 2)
    frames = stream.getvalue().split("\r")[1:]
    assert [float(frame.split()[-2]) for frame in frames] == [0.0, 1.5]  # seconds shown
