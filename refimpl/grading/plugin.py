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
import signal
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from refimpl.grading.recorder import make_recorder, points_of

__all__ = ["CHANNEL", "DEFAULT_MEMORY_LIMIT_MB", "DEFAULT_TIME_LIMIT_S", "LimitError",
           "TimeLimitExceeded", "points_of"]


try:  # POSIX only; without it (Windows) there is no memory cap
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MEMORY_LIMIT_MB = 1024


# Set by the grading child (refimpl.grading.keeper) before pytest starts: `send(**event)`;
# handed to the recorder and cleared at configure. None in a plain `pytest exercises/NAME`.
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
    global CHANNEL
    send, CHANNEL = CHANNEL, None  # from now on reachable only inside the recorder's closures
    config.pluginmanager.register(make_recorder(send), "refimpl-grading-recorder")


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
