"""The pytest plugin under every graded run: time and memory limits, points, the event channel.

It runs inside the child process that `refimpl grade` starts (and in `pytest exercises/NAME`
runs, via exercises/pytest.ini). Per test, setup and call each get a SIGALRM time limit whose
exception derives from `BaseException`, so a learner's `except Exception` cannot swallow it;
the address space is capped with `setrlimit`, so a runaway allocation raises `MemoryError`
in the test that made it. Under `refimpl grade` each test's start, any failure (the moment it
happens) and its outcome go to the grader as signed events (`refimpl.grading.channel`), and
after each test a tripwire (`refimpl.grading.tripwire`) checks that the tests, pytest and the
grader are as they were before the solution was imported.
"""

from __future__ import annotations

import contextlib
import gc
import re
import signal
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from refimpl.grading.tripwire import Snapshot

try:  # POSIX only; without it (Windows) there is no memory cap
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MEMORY_LIMIT_MB = 1024
MESSAGE_CHARS = 300  # longest failure message kept per test
# Exception names dropped from the front of a message (pytest may qualify them with modules).
_OWN_EXCEPTION = re.compile(r"^([\w.]+\.)?(AssertionError|LimitError|SolutionLoadError): ")


# Set by the grading child (refimpl.grading.keeper) before pytest starts: `send(**event)`.
# None in a plain `pytest exercises/NAME` run, which only prints the score.
CHANNEL = None


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
    """Collects each test's points and outcome; sends the events and prints the score."""

    def __init__(self, config: pytest.Config) -> None:
        self.send = CHANNEL
        self.points: dict[str, int] = {}
        self.failures: dict[str, str] = {}  # nodeid -> first failure message
        self.snapshot: Snapshot | None = None

    def _write(self, **event: object) -> None:
        if self.send is not None:
            self.send(**event)

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
        # Before the solution is imported (the `solution` fixture does that in the first
        # test's setup): what the tests, pytest and the grader are made of.
        modules = [module for module in list(sys.modules.values()) if module is not None]
        self.snapshot = Snapshot.take(
            [module for module in modules if module.__name__.partition(".")[0] in _WATCHED],
            strict=[module for module in modules if _in_folder(module, session.config.rootpath)])

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """Log that a test started (the parent's watchdog times it)."""
        self._write(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Send each failure at once (the grader keeps the first) and keep its message."""
        if report.failed:
            message = _message(report)
            self.failures.setdefault(report.nodeid, message)
            self._write(event="failed", nodeid=report.nodeid, message=message)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """Check the tripwire, then send the test's outcome."""
        changed = self.snapshot.changes() if self.snapshot is not None else []
        if changed:
            self._write(event="tampered", message="the solution changed "
                        + ", ".join(changed))
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


# Top-level packages whose modules the tripwire watches, besides the tests' own folder.
_WATCHED = {"_pytest", "pytest", "pluggy", "builtins", "refimpl"}


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
