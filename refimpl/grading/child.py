"""One grading child: a fresh folder for it, the keeper that runs it, and the watch over it.

`Run` lays out a new folder per child (a copy of the exercise without `.meta`, a copy of the
solution and the Python files beside it, an empty home and temp folder), starts the keeper
(`refimpl.grading.keeper`) with the plan of what the tests may read and write, hands it the
run's key, and feeds what arrives on the channel to the `Judge` until the child ends. The
parent's watchdog asks the keeper to stop a test stuck past both its limits plus slack.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import refimpl
from refimpl.grading.catalogue import Exercise
from refimpl.grading.channel import KEY_BYTES, Judge
from refimpl.grading.loader import SOLUTION_ENV

__all__ = ["Run"]

POLL_S = 0.02  # longest wait for the channel before the parent looks at the clock again
COLLECT_LIMIT_S = 60.0  # a child that has not listed its tests by then is stopped
STOP_GRACE_S = 10.0  # after SIGTERM, how long the keeper has to clear up before SIGKILL
FILE_BYTES = 256 << 20  # the largest file the tests may write
EXTRA_PROCESSES = 64  # how many processes the tests may add (not enforced for root)
MAX_HELPERS, HELPER_BYTES = 200, 1 << 20  # Python files copied from beside the solution
# Read-only system folders: the C library, shared libraries, locale and time-zone data.
SYSTEM_READABLE = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc",
                   "/sys", "/dev")


def _copy_exercise(exercise: Exercise, to: Path) -> Path:
    """The exercises folder's settings and this exercise, without its hidden `.meta/`."""
    to.mkdir(parents=True)
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy2(exercise.path.parent / name, to / name)
    shutil.copytree(exercise.path, to / exercise.name,
                    ignore=shutil.ignore_patterns(".*", "__pycache__"))
    return to


def _copy_solution(solution: Path, to: Path) -> Path:
    """Copy the solution and the Python files beside it (helpers it may import) into `to`."""
    # The tests may not read the folder it is in: that may be the exercise's own.
    to.mkdir(parents=True)
    helpers = sorted(path for path in solution.parent.glob("*.py")
                     if path != solution and path.is_file() and path.stat().st_size <= HELPER_BYTES)
    for path in helpers[:MAX_HELPERS]:
        shutil.copy2(path, to / path.name)
    shutil.copy2(solution, to / solution.name)
    return to / solution.name


def _python_readable() -> list[str]:
    """Python, its standard library and installed packages, and refimpl itself."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(refimpl.__file__))}
    return sorted({os.path.realpath(path) for path in paths} | paths)


@dataclass
class Run:
    """One child over the tests not yet graded, in a new folder; `watch()` runs it to its end."""

    exercise: Exercise
    solution: Path
    folder: Path  # made here, new for this child
    time_limit_s: float
    memory_limit_mb: int
    confine: bool

    def _plan(self, channel_fd: int, done: list[str]) -> tuple[dict, dict[str, str]]:
        exercises = _copy_exercise(self.exercise, self.folder / "exercises")
        solution = _copy_solution(self.solution, self.folder / "solution")
        home, tmp = self.folder / "home", self.folder / "tmp"
        home.mkdir()
        tmp.mkdir()
        (self.folder / "done.txt").write_text("\n".join(done), encoding="utf-8")
        env = dict(os.environ)
        env.update({
            SOLUTION_ENV: str(solution), "HOME": str(home), "TMPDIR": str(tmp),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"), "MPLCONFIGDIR": str(tmp),
            "REFIMPL_CACHE_DIR": str(tmp), "NUMBA_CACHE_DIR": str(tmp),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only our plugin: nothing else runs
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        env.pop("REFIMPL_EXERCISES", None)
        pytest_args = [
            str(exercises / self.exercise.name / self.exercise.tests.name),
            "-c", str(exercises / "pytest.ini"), "--rootdir", str(exercises),
            "-q", "--no-header", "-p", "no:faulthandler",
            "--grade-skip", str(self.folder / "done.txt"),
            "--grade-time-limit", f"{self.time_limit_s:g}",
            "--grade-memory-limit-mb", str(self.memory_limit_mb),
        ]
        plan = {
            "key_bytes": KEY_BYTES, "channel_fd": channel_fd, "pytest_args": pytest_args,
            "confine": self.confine, "readable": [*SYSTEM_READABLE, *_python_readable(),
                                                   str(self.folder)],
            "writable": [str(home), str(tmp), os.devnull],
            # A backstop only: each test has its alarm, and the watchdog stops a stuck one.
            "cpu_s": int(60 + 50 * self.time_limit_s), "file_bytes": FILE_BYTES,
            "extra_processes": EXTRA_PROCESSES,
        }
        return plan, env

    def watch(self, judge: Judge, done: list[str], output: Path) -> tuple[int, bool]:
        """Run the child to its end: (its status as `Popen.returncode`, killed by the watchdog?)."""
        # A `Tampered` from the judge propagates, after the child is stopped.
        read_fd, write_fd = os.pipe()
        plan, env = self._plan(write_fd, done)
        judge.new_child()
        with output.open("ab") as out:
            keeper = subprocess.Popen(
                [sys.executable, "-m", "refimpl.grading.keeper", json.dumps(plan)],
                cwd=self.folder / "tmp", env=env, stdin=subprocess.PIPE, stdout=out,
                stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        try:
            with contextlib.suppress(BrokenPipeError):  # a keeper that died at once: no tests
                keeper.stdin.write(judge.key)
                keeper.stdin.close()
            return self._follow(keeper, read_fd, judge)
        finally:
            self._stop(keeper)
            os.close(read_fd)

    def _follow(self, keeper: subprocess.Popen, read_fd: int, judge: Judge) -> tuple[int, bool]:
        stuck_after_s = 2 * self.time_limit_s + 3.0  # setup and call each have the limit
        started = time.monotonic()
        running, since, killed, open_, ended = None, started, False, True, None
        while open_ or keeper.poll() is None:
            if keeper.poll() is not None:  # the keeper has killed everything that could write
                ended = ended or time.monotonic()
                if time.monotonic() - ended > STOP_GRACE_S:
                    break
            if open_ and select.select([read_fd], [], [], POLL_S)[0]:
                data = os.read(read_fd, 1 << 16)
                open_ = bool(data)  # b"": every copy of the write end is closed
                judge.feed(data)
            elif not open_:
                time.sleep(POLL_S)
            now = time.monotonic()
            if judge.running != running:  # a new start restarts the clock
                running, since = judge.running, now
            overdue = (running is not None and now - since > stuck_after_s) or (
                not judge.tests and now - started > COLLECT_LIMIT_S)
            if overdue and not killed:
                keeper.send_signal(signal.SIGTERM)  # the keeper kills every process below it
                killed = True
        return keeper.returncode, killed

    @staticmethod
    def _stop(keeper: subprocess.Popen) -> None:
        """Make sure the keeper (and so everything below it) is gone."""
        if keeper.poll() is None:
            keeper.send_signal(signal.SIGTERM)
            try:
                keeper.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(keeper.pid, signal.SIGKILL)
                keeper.wait()
