"""The recorder: what the grading plugin tells the grader about each test, and when.

Events, in order: `collected` (the tests, their points and titles), then per test `start`,
`failed` (each failing phase, at once) and `result` (passed only if the test's call itself
passed: a skip or an xfail is not a pass), and `finished` when the session ends normally. The
signing function lives only in the closures of the recorder's hooks, and each hook checks that
pytest really is running the test it names (pytest's own protocol frame for that very item is
on the stack), so a solution calling the hooks itself can name only the test it is in: the
grader then sees that test's real failure after its forged result, or a process that ended
before confirming it (see `channel.Judge`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import _pytest.runner
import pytest

from refimpl.grading.tripwire import Snapshot

__all__ = ["make_recorder", "points_of"]

MESSAGE_CHARS = 300  # longest failure message kept per test
# Exception names dropped from the front of a message (pytest may qualify them with modules).
_OWN_EXCEPTION = re.compile(r"^([\w.]+\.)?(AssertionError|LimitError|SolutionLoadError): ")
# Taken at import, before any solution runs: the frame that runs one test, and how to see it.
_PROTOCOL_CODE = _pytest.runner.pytest_runtest_protocol.__code__
_getframe = sys._getframe
# Not watched: `sys` (pytest swaps its streams around every test) and the keeper's `__main__`.
_UNWATCHED = {"sys", "__main__"}


def points_of(item: pytest.Item) -> int:
    """The points a test is worth (its `points` marker; 1 without one)."""
    marker = item.get_closest_marker("points")
    return int(marker.args[0]) if marker is not None else 1


def _running_item() -> object | None:
    """The item whose test pytest is running now (from its protocol frame), or None."""
    frame = _getframe(1)
    while frame is not None:
        if frame.f_code is _PROTOCOL_CODE:
            return frame.f_locals.get("item")
        frame = frame.f_back
    return None


def make_recorder(send) -> object:
    """The plugin object that records outcomes and sends events through `send` (or not)."""
    collected: dict[str, pytest.Item] = {}  # nodeid -> the collected item itself
    points: dict[str, int] = {}
    failures: dict[str, str] = {}  # nodeid -> first failure message
    called: set[str] = set()  # tests whose call phase passed
    snapshot: list[Snapshot] = []

    def write(**event: object) -> None:
        if send is not None:
            send(**event)

    def genuine(nodeid: str) -> bool:
        """Is pytest running `nodeid` now? If not, the caller is a forger: void the grade."""
        item = _running_item()
        if nodeid in collected and item is collected[nodeid]:
            return True
        write(event="tampered", message=f"a hook was called for {nodeid} from outside pytest")
        return False

    class Recorder:
        def pytest_collection_modifyitems(self, config: pytest.Config,
                                          items: list[pytest.Item]) -> None:
            """Drop the tests that an earlier child, which then crashed, already ran."""
            path = config.getoption("--grade-skip")
            if path:
                done = set(Path(path).read_text(encoding="utf-8").splitlines())
                items[:] = [item for item in items if item.nodeid not in done]

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            """Send the tests about to run; take the tripwire's snapshot."""
            collected.update({item.nodeid: item for item in session.items})
            points.update({nodeid: points_of(item) for nodeid, item in collected.items()})
            write(event="collected", tests=[
                {"nodeid": nodeid, "name": item.name, "points": points[nodeid],
                 "title": _title(item)} for nodeid, item in collected.items()])
            # Before the solution is imported (the `solution` fixture does that in the first
            # test's setup): what every loaded module, the tests' own strictly, is made of.
            modules = [module for name, module in list(sys.modules.items())
                       if module is not None and name not in _UNWATCHED]
            own = [module for module in modules if _in_folder(module, session.config.rootpath)]
            snapshot.append(Snapshot.take([m for m in modules if m not in own], strict=own))

        def pytest_runtest_logstart(self, nodeid: str) -> None:
            """Send that a test started (the parent's watchdog times it)."""
            if genuine(nodeid):
                write(event="start", nodeid=nodeid)

        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            """Send each failure at once (the grader keeps the first); note a passed call."""
            if not genuine(report.nodeid):
                return
            if report.failed:
                message = _message(report)
                failures.setdefault(report.nodeid, message)
                write(event="failed", nodeid=report.nodeid, message=message)
            elif report.when == "call" and report.passed:
                called.add(report.nodeid)

        def pytest_runtest_logfinish(self, nodeid: str) -> None:
            """Check the tripwire, then send the test's outcome."""
            if not genuine(nodeid):
                return
            changed = snapshot[0].changes() if snapshot else []
            if changed:
                write(event="tampered", message="the solution changed " + ", ".join(changed))
            passed = nodeid in called and nodeid not in failures
            message = failures.get(nodeid, "" if passed else "skipped, or did not run")
            write(event="result", nodeid=nodeid, passed=passed, message=message)

        def pytest_collectreport(self, report: pytest.CollectReport) -> None:
            """Send that a test file could not even be collected."""
            if report.failed:
                write(event="collect_error", message=_message(report))

        def pytest_sessionfinish(self, session: pytest.Session) -> None:
            """Send that the session ended normally (never from inside a test)."""
            if _running_item() is None:
                write(event="finished")
            else:
                write(event="tampered", message="the session's end was forged")

        def pytest_terminal_summary(self, terminalreporter) -> None:
            """Print `score: X/Y` under pytest's own summary."""
            score = sum(p for nodeid, p in points.items()
                        if nodeid in called and nodeid not in failures)
            terminalreporter.write_line(f"score: {score}/{sum(points.values())}")

    return Recorder()


def _in_folder(module: object, folder) -> bool:
    path = getattr(module, "__file__", None)
    return bool(path) and str(path).startswith(str(folder))


def _title(item: pytest.Item) -> str:
    doc = getattr(getattr(item, "function", None), "__doc__", None) or item.name
    return doc.strip().splitlines()[0]


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """One line saying why a test failed: the exception and its message."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    # Assertion rewriting appends the compared values on later lines; keep the first one.
    text = " ".join(text.strip().splitlines()[:1]) or "failed"
    text = _OWN_EXCEPTION.sub("", text)  # the message says it all; other names are kept
    return text[:MESSAGE_CHARS]
