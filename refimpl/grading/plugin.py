"""The pytest plugin under every graded run: time and memory limits, points, a results log.

It runs inside the child process that `refimpl grade` starts (and in `pytest exercises/NAME`
runs, via exercises/pytest.ini). Per test, setup and call each get a SIGALRM time limit whose
exception derives from `BaseException`, so a learner's `except Exception` cannot swallow it;
the address space is capped with `setrlimit`, so a runaway allocation raises `MemoryError`
in the test that made it. Each test's start and outcome are appended to a JSON-lines log
(`--grade-log`) and flushed at once, so the parent knows how far a child got if it crashes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import signal
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

try:  # POSIX only; without it (Windows) there is no memory cap
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MEMORY_LIMIT_MB = 1024
MESSAGE_CHARS = 300  # longest failure message kept per test
# Exception names dropped from the front of a message (pytest may qualify them with modules).
_OWN_EXCEPTION = re.compile(r"^([\w.]+\.)?(AssertionError|LimitError|SolutionLoadError): ")


class TimeLimitExceeded(BaseException):
    """A test ran past its time limit (raised from the SIGALRM handler)."""


class LimitError(Exception):
    """A test failed by a limit: too slow or too much memory (reported as a plain failure)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the grading options."""
    group = parser.getgroup("refimpl grading")
    group.addoption("--grade-time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                    help="seconds allowed for each test's setup and each test's call")
    group.addoption("--grade-memory-limit-mb", type=int, default=DEFAULT_MEMORY_LIMIT_MB,
                    help="extra address space (MiB) the test process may take; 0: no limit")
    group.addoption("--grade-log", default=None,
                    help="append each test's start and outcome to this JSON-lines file")
    group.addoption("--grade-skip", default=None,
                    help="a file of test ids (one a line) that an earlier process already ran")


def pytest_configure(config: pytest.Config) -> None:
    """Cap memory, disable core dumps, and attach the recorder."""
    extra_mb = config.getoption("--grade-memory-limit-mb")
    if resource is not None and hasattr(resource, "RLIMIT_AS") and extra_mb > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = _address_space_bytes() + extra_mb * (1 << 20)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        with contextlib.suppress(ValueError, OSError):  # macOS refuses RLIMIT_AS: no cap
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    if resource is not None:  # a crashing solution should not leave a core file behind
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    config.pluginmanager.register(Recorder(config), "refimpl-grading-recorder")


def _address_space_bytes() -> int:
    """This process's current virtual size (Linux), or 0 where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()


def _alarm_handler(limit_s: float):
    def raise_time_limit(signum: int, frame: object) -> None:
        raise TimeLimitExceeded(f"took longer than the {limit_s:g} s time limit "
                                "(an infinite loop, or far too slow)")
    return raise_time_limit


def _limited(item: pytest.Item, phase: str) -> Iterator[None]:
    """Run one phase of a test under the time limit; turn a hit limit into a `LimitError`."""
    limit_s = item.config.getoption("--grade-time-limit")
    previous = signal.signal(signal.SIGALRM, _alarm_handler(limit_s))
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    failure: LimitError | None = None
    try:
        return (yield)
    except TimeLimitExceeded as error:
        failure = LimitError(f"{phase} {error}")
    except MemoryError as error:
        # The traceback holds the frames, and the frames hold what was allocated: clear them,
        # or the memory stays taken for every later test.
        traceback.clear_frames(error.__traceback__)
        failure = LimitError(f"{phase} ran out of memory (more than the "
                             f"{item.config.getoption('--grade-memory-limit-mb')} MiB allowed)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    gc.collect()
    raise failure


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Time-limit the setup (it imports the learner's file)."""
    return (yield from _limited(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Time-limit the test itself."""
    return (yield from _limited(item, "the test"))


def points_of(item: pytest.Item) -> int:
    """The points a test is worth (its `points` marker; 1 without one)."""
    marker = item.get_closest_marker("points")
    return int(marker.args[0]) if marker is not None else 1


class Recorder:
    """Collects each test's points and outcome; writes the log and the score summary."""

    def __init__(self, config: pytest.Config) -> None:
        path = config.getoption("--grade-log")
        self.log = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self.points: dict[str, int] = {}
        self.failures: dict[str, str] = {}  # nodeid -> first failure message

    def _write(self, **event: object) -> None:
        if self.log is not None:
            self.log.write(json.dumps(event) + "\n")
            self.log.flush()

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Drop the tests that an earlier child, which then crashed, already ran."""
        path = config.getoption("--grade-skip")
        if path:
            done = set(Path(path).read_text(encoding="utf-8").splitlines())
            items[:] = [item for item in items if item.nodeid not in done]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Log the tests about to run, with their points and titles."""
        self.points = {item.nodeid: points_of(item) for item in session.items}
        tests = [{"nodeid": item.nodeid, "name": item.name, "points": self.points[item.nodeid],
                  "title": _title(item)} for item in session.items]
        self._write(event="collected", tests=tests)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """Log that a test started (the parent's watchdog times it)."""
        self._write(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the first failure message of each test."""
        if report.failed and report.nodeid not in self.failures:
            self.failures[report.nodeid] = _message(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """Log the test's outcome."""
        message = self.failures.get(nodeid, "")
        self._write(event="result", nodeid=nodeid, passed=nodeid not in self.failures,
                    message=message)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Log a test file that could not even be collected."""
        if report.failed:
            self._write(event="collect_error", message=_message(report))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Print `score: X/Y` under pytest's own summary."""
        total = sum(self.points.values())
        score = sum(p for nodeid, p in self.points.items() if nodeid not in self.failures)
        terminalreporter.write_line(f"score: {score}/{total}")

    def pytest_unconfigure(self) -> None:
        """Close the log."""
        if self.log is not None:
            self.log.close()


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
