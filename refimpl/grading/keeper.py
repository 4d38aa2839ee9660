"""The keeper: the process between the grader and the tests, which leaves nothing behind.

`python -m refimpl.grading.keeper PLAN` reads the run's key from standard input, makes itself a
child subreaper (so every orphan of the tests, a `setsid` daemon included, becomes its child
rather than init's), and forks the test process, which confines itself (`confine.py`) and runs
pytest with the grading plugin writing to the channel. The keeper stays outside the
confinement, so the tests cannot signal it. When the test process ends, or the grader sends
SIGTERM, it kills every process descended from it, then ends the way the test process did
(the same status, or the same signal), which is what the grader reports.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time

__all__ = ["kill_descendants", "main"]

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
KILL_ROUNDS = 200  # each round kills what it finds; a fork bomb is outpaced well before this


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone already
            found[int(entry)] = int(fields[1])
    return found


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, frontier = set(), [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def kill_descendants(reaped: dict[int, int], group: int) -> None:
    """SIGKILL and reap every descendant of this process; their statuses go into `reaped`."""
    # Without /proc (not Linux) only the tests' process group `group` can be found.
    if not os.path.isdir("/proc"):
        if group > 0:  # 0 would be our own group
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        _reap(reaped)
        return
    for _ in range(KILL_ROUNDS):
        _reap(reaped)
        living = _descendants(os.getpid())
        if not living:
            return
        for pid in living:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _reap(reaped: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reaped[pid] = status


def _run_tests(plan: dict, key: bytearray) -> int:
    """In the forked test process: confine, then run pytest; returns pytest's exit code."""
    import pytest

    from refimpl.grading import confine, plugin
    from refimpl.grading.channel import signer

    os.setsid()  # its own process group: the one thing to kill where /proc cannot be read
    confine.set_limits(cpu_s=plan["cpu_s"], file_bytes=plan["file_bytes"],
                       extra_processes=plan["extra_processes"])
    if plan["confine"]:
        confine.confine(plan["readable"], plan["writable"])
    plugin.CHANNEL = signer(bytes(key), plan["channel_fd"])
    key[:] = bytes(len(key))  # the frames below the tests keep no copy of the key
    return int(pytest.main(plan["pytest_args"]))


def main(argv: list[str]) -> int:
    """Run one grading child as described in the module docstring."""
    plan = json.loads(argv[0])
    key = bytearray(sys.stdin.buffer.read(plan["key_bytes"]))
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # Linux only
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # A grader that dies (killed, say) sends the keeper SIGTERM, which clears up below it.
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    import resource  # a crash of the tests should leave no core file
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    reaped: dict[int, int] = {}
    tests = [0]  # the test process's pid, once forked
    # Installed before the fork, so a SIGTERM at any moment clears up instead of killing us.
    signal.signal(signal.SIGTERM, lambda signum, frame: kill_descendants(reaped, tests[0]))
    child = tests[0] = os.fork()
    if child == 0:  # the test process
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        code = 70  # EX_SOFTWARE: pytest itself could not run
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            code = _run_tests(plan, key)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(plan["channel_fd"])  # the grader sees the end of the channel when the tests end
    while child not in reaped:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        reaped[pid] = status
    kill_descendants(reaped, child)
    status = reaped.get(child, 0)
    if os.WIFSIGNALED(status):  # end the same way, so the grader can name the signal
        if os.WTERMSIG(status) != signal.SIGKILL:  # SIGKILL's handler cannot be set
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
