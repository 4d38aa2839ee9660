"""The progress bar: drawn in place, throttled, finished with a newline."""

from __future__ import annotations

import io

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
