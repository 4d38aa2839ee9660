"""The isolated runner: grades a solution file by running pytest on it in confined children.

The learner's code never runs in the grader's process. Each child (pytest with the grading
plugin, `child.py`) gets a fresh copy of the exercise without its reference, a private home and
temp folder, a time limit per test, a memory cap, and CPU, file-size and process limits; it
reports each test's start, failures and outcome as signed events. A child that dies (a
segfault, `os._exit`) or stops answering is stopped, the test it was running is charged with a
message, and a fresh child (in a fresh folder) runs the tests not yet run, so every failure
costs the test it happened in and the grader always finishes.

Threat model. The adversary writes the solution file and knows this code; the grader, the
exercises and the machine are trusted. What a solution can try, and what stops it:

- read the reference solution or other copies of the exercises (another checkout, `.git`):
  Landlock (`confine.py`) lets the tests read only Python, installed packages, refimpl's
  package, system folders and their own folder, which holds a copy of the exercise without
  `.meta/` and a copy of the solution with the Python files beside it;
- write outside its folder (plant a `conftest.py`, edit the tests or the grader, leave files):
  Landlock allows writes only to its home and temp folders, the exercise copy is read-only,
  and every child gets a new folder;
- forge results (append records to a log, write to every descriptor, empty the recorder's
  failures through `gc`, call the recorder's hooks from pytest's plugin manager, skip its
  tests): results travel only as events signed with a key made for the run and handed over
  before the solution is imported, numbered, in test order, one outcome per test, a failure
  final once sent, a pass only for a passed call, and a result counting only once the child
  goes on past it (`channel.py`, `recorder.py`); a hook called for a test pytest is not
  running, or anything else out of order, voids the grade (score 0);
- rewrite the tests in place (a test function's code, the test module in `sys.modules`, a
  helper, pytest's reporting, a library the tests call, builtins): a tripwire compares every
  module loaded before the solution with what it was, after each test, and a change voids the
  grade;
- leave processes behind (a `setsid` daemon, a fork bomb), or kill the grader: the keeper
  between the grader and the tests is a child subreaper outside the confinement, so orphans
  become its children and the tests cannot signal it or the grader (Landlock ABI 6+); it kills
  every descendant when the tests end;
- exhaust the machine: per-test alarms, a watchdog, RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE,
  RLIMIT_NPROC (not for root), no TCP (Landlock ABI 4+).

Out of scope. The solution shares a process with its tests, which the exercises need in order
to measure its memory and speed, so a solution written against this code can still forge its
own grade by digging below Python's ordinary reach: taking the signing function out of a
closure cell (`gc.get_referents`, `__closure__`), editing frames or objects through `ctypes`,
or patching what the tripwire watches and restoring it between two checks (from a thread, say).
What the isolation guarantees even then is that no other grade, no file outside the run's
folder, and no process outside the run is affected. Also out of scope: the tests' own source,
which the solution can read (it is public in the course, and in memory anyway); comparisons
that a returned object overrides (`__eq__`), which each exercise's tests must guard; kernel
exploits, side channels, other users' processes (RLIMIT_NPROC is per user), and what Landlock
does not cover (UDP, shared memory): the tests inherit the grader's environment (less the home
and cache variables they get anew), so grade untrusted files with no secrets in it. Where the
kernel has no Landlock (not Linux, or Linux before 5.13) the run is not confined: reads and
writes outside the folder and signals to other processes are then possible, and the report
does not say so; the channel, the tripwire and the keeper still apply (finding orphans needs
Linux's /proc and subreapers; elsewhere only the tests' process group is killed).
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import tempfile
import time
from numbers import Integral, Real
from pathlib import Path

from refimpl.errors import ConfigError
from refimpl.grading.catalogue import GradingError, find_exercise
from refimpl.grading.channel import KEY_BYTES, Judge, Tampered
from refimpl.grading.child import Run
from refimpl.grading.confine import landlock_abi
from refimpl.grading.plugin import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S
from refimpl.grading.report import GradeReport, TestResult

__all__ = ["MAX_TIME_LIMIT_S", "check_limits", "grade"]

OUTPUT_TAIL_CHARS = 400  # of the child's output, quoted when it could not collect
MAX_TIME_LIMIT_S = 3600.0  # per test; beyond an hour the limit is a typo


def check_limits(time_limit_s: object, memory_limit_mb: object) -> None:
    """Refuse limits that would grade nothing or limit nothing, naming the field."""
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, Real):
        raise ConfigError("time_limit_s", time_limit_s, "must be a number of seconds")
    if not (math.isfinite(time_limit_s) and 0 < time_limit_s <= MAX_TIME_LIMIT_S):
        raise ConfigError("time_limit_s", time_limit_s,
                          f"must be finite, above 0 and at most {MAX_TIME_LIMIT_S:g} s")
    if isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, Integral):
        raise ConfigError("memory_limit_mb", memory_limit_mb, "must be a whole number of MiB")
    if memory_limit_mb < 0:
        raise ConfigError("memory_limit_mb", memory_limit_mb,
                          "must be at least 0 (0: no memory cap)")


def _describe_death(returncode: int, killed: bool, time_limit_s: float) -> str:
    if killed:
        return (f"took longer than the {time_limit_s:g} s time limit and did not stop, "
                "so its process was killed")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the test process crashed ({name}) during this test"
    return f"the test process exited (status {returncode}) during this test"


def grade(
    exercise_name: str,
    solution: str | os.PathLike[str],
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
) -> GradeReport:
    """Grade the file `solution` on the exercise `exercise_name` in confined child processes."""
    check_limits(time_limit_s, memory_limit_mb)
    exercise = find_exercise(exercise_name)
    solution_path = Path(solution).resolve()
    if not solution_path.is_file():
        raise GradingError("solution", str(solution), "no such file")
    started = time.monotonic()
    judge = Judge(key=secrets.token_bytes(KEY_BYTES))
    tampered = ""
    with tempfile.TemporaryDirectory(prefix="refimpl-grade-") as tmp:
        work = Path(tmp)
        output = work / "output.txt"
        for round_ in range(100):  # each round runs at least one more test, or stops
            before = len(judge.results)
            run = Run(exercise, solution_path, work / f"run-{round_}", time_limit_s,
                      memory_limit_mb, confine=landlock_abi() > 0)
            try:
                returncode, killed = run.watch(judge, list(judge.results), output)
            except Tampered as error:
                tampered = str(error)
                break
            judge.child_ended(_describe_death(returncode, killed, time_limit_s))
            if not judge.tests or len(judge.results) in (before, len(judge.tests)):
                break
        text = _tail(output, 10 * OUTPUT_TAIL_CHARS)
    return _report(exercise, solution_path, judge, tampered, text, time.monotonic() - started)


def _tail(path: Path, limit: int) -> str:
    """The last `limit` bytes of `path` as text (a flooding child may have written MiBs)."""
    if not path.exists():
        return ""
    with path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - limit))
        return file.read().decode("utf-8", errors="replace")


def _report(exercise, solution_path: Path, judge: Judge, tampered: str, output: str,
            duration_s: float) -> GradeReport:
    error = ""
    if tampered:
        error = f"the solution tampered with the grading ({tampered}): every test is lost"
    elif not judge.tests:
        error = judge.collect_error or (
            "the tests could not start: " + output.strip()[-OUTPUT_TAIL_CHARS:])
    tests = tuple(_result(test, (False, "void: the solution tampered with the grading")
                          if tampered else judge.results.get(test["nodeid"]))
                  for test in judge.tests)
    max_score = sum(test.max_points for test in tests) if tests else exercise.points
    return GradeReport(exercise=exercise.name, solution=str(solution_path), tests=tests,
                       max_score=max_score, error=error, duration_s=duration_s)


def _result(test: dict, outcome: tuple[bool, str] | None) -> TestResult:
    passed, message = outcome if outcome is not None else (False, "did not run")
    return TestResult(name=test["name"], title=test["title"],
                      points=test["points"] if passed else 0, max_points=test["points"],
                      passed=passed, message=message)
