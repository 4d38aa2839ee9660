"""The sandboxed runner: grades a solution file by running pytest on it in a child process.

The learner's code never runs in the grader's process. The child (pytest with the grading
plugin) enforces a time limit per test and a memory cap, and logs each test's start and
outcome as it goes. The parent watches that log: a child that dies (a segfault, `os._exit`)
or stops answering (a loop the alarm cannot interrupt) is killed if needed, the test it was
running is charged with a message, and a fresh child runs the tests not yet run. So every
failure costs the test it happened in, and the grader always finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from refimpl.grading.catalogue import Exercise, GradingError, find_exercise
from refimpl.grading.loader import SOLUTION_ENV
from refimpl.grading.plugin import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S
from refimpl.grading.report import GradeReport, TestResult

__all__ = ["grade"]

POLL_S = 0.02  # how often the parent reads the child's log
COLLECT_LIMIT_S = 60.0  # a child that has not listed its tests by then is stopped
OUTPUT_TAIL_CHARS = 400  # of the child's output, quoted when it could not collect


@dataclass
class _Progress:
    """What the children have logged so far, across restarts."""

    tests: list[dict] = field(default_factory=list)  # from the first "collected" event
    results: dict[str, tuple[bool, str]] = field(default_factory=dict)  # nodeid -> outcome
    collect_error: str = ""

    def read(self, events: list[dict], running: str | None) -> str | None:
        """Take in new events; return the test now running (started, no outcome yet)."""
        for event in events:
            kind = event["event"]
            if kind == "collected" and not self.tests:
                self.tests = event["tests"]
            elif kind == "start":
                running = event["nodeid"]
            elif kind == "result":
                self.results[event["nodeid"]] = (event["passed"], event["message"])
                running = None
            elif kind == "collect_error":
                self.collect_error = event["message"]
        return running


def _read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """Complete JSON lines appended to `path` since `offset`, and the new offset."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            data = log.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
    return [json.loads(line) for line in data[:end].splitlines() if line], offset + end


def _child_command(exercise: Exercise, work: Path, time_limit_s: float,
                   memory_limit_mb: int) -> list[str]:
    return [
        sys.executable, "-m", "pytest", str(exercise.tests),
        "-c", str(exercise.path.parent / "pytest.ini"), "--rootdir", str(exercise.path.parent),
        "-q", "--no-header", "-p", "no:faulthandler",
        "--grade-log", str(work / "log.jsonl"), "--grade-skip", str(work / "done.txt"),
        "--grade-time-limit", f"{time_limit_s:g}", "--grade-memory-limit-mb", str(memory_limit_mb),
    ]


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


def _run_child(command: list[str], env: dict[str, str], work: Path, progress: _Progress,
               time_limit_s: float) -> None:
    """Run one child to its end, recording outcomes (and the death of a running test)."""
    log_path = work / "log.jsonl"
    offset = log_path.stat().st_size if log_path.exists() else 0
    # Setup and call each have the limit; beyond both plus slack the alarm has failed.
    stuck_after_s = 2 * time_limit_s + 3.0
    with (work / "output.txt").open("ab") as output:
        child = subprocess.Popen(command, cwd=work, env=env, stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()
    running, running_since, killed = None, started, False
    while True:
        returncode = child.poll()
        events, offset = _read_new(log_path, offset)
        now = time.monotonic()
        for event in events:  # a new start restarts the clock
            if event["event"] == "start":
                running_since = now
        running = progress.read(events, running)
        if returncode is not None:
            break
        overdue = (running is not None and now - running_since > stuck_after_s) or (
            not progress.tests and now - started > COLLECT_LIMIT_S)
        if overdue and not killed:
            os.killpg(child.pid, signal.SIGKILL)  # the whole group: the solution may fork
            killed = True
        time.sleep(POLL_S)
    if running is not None:
        progress.results[running] = (False, _describe_death(returncode, killed, time_limit_s))


def grade(
    exercise_name: str,
    solution: str | os.PathLike[str],
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
) -> GradeReport:
    """Grade the file `solution` on the exercise `exercise_name` in a separate process."""
    exercise = find_exercise(exercise_name)
    solution_path = Path(solution).resolve()
    if not solution_path.is_file():
        raise GradingError("solution", str(solution), "no such file")
    started = time.monotonic()
    env = dict(os.environ)
    env.update({
        SOLUTION_ENV: str(solution_path),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only our plugin: faster, and nothing else runs
        "PYTHONDONTWRITEBYTECODE": "1",  # leave no __pycache__ in the exercises folder
    })
    progress = _Progress()
    with tempfile.TemporaryDirectory(prefix="refimpl-grade-") as tmp:
        work = Path(tmp)
        command = _child_command(exercise, work, time_limit_s, memory_limit_mb)
        for _ in range(100):  # each round runs at least one more test, or stops
            (work / "done.txt").write_text("\n".join(progress.results), encoding="utf-8")
            before = len(progress.results)
            _run_child(command, env, work, progress, time_limit_s)
            if not progress.tests or len(progress.results) in (before, len(progress.tests)):
                break
        output = (work / "output.txt").read_text(encoding="utf-8", errors="replace")
    error = ""
    if not progress.tests:
        error = progress.collect_error or (
            "the tests could not start: " + output.strip()[-OUTPUT_TAIL_CHARS:])
    tests = tuple(_result(test, progress.results.get(test["nodeid"])) for test in progress.tests)
    max_score = sum(test.max_points for test in tests) if tests else exercise.points
    return GradeReport(exercise=exercise.name, solution=str(solution_path), tests=tests,
                       max_score=max_score, error=error,
                       duration_s=time.monotonic() - started)


def _result(test: dict, outcome: tuple[bool, str] | None) -> TestResult:
    passed, message = outcome if outcome is not None else (False, "did not run")
    return TestResult(name=test["name"], title=test["title"],
                      points=test["points"] if passed else 0, max_points=test["points"],
                      passed=passed, message=message)
