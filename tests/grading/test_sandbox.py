"""The grader survives what a solution can do to its process: loops, crashes, bad syntax,
memory bombs, and exits; each costs the test it happened in (or the file) and nothing more."""

from __future__ import annotations

import pytest

from refimpl.grading import find_exercise

# The reference solution, misbehaving on the lone node Node(1) (one test) or on import.
MISBEHAVING = """
import os, signal, sys

_Reference = Solution


class Solution(_Reference):
    def connect(self, root):
        if root is not None and root.val == 1 and not (root.left or root.right):
            {misbehave}
        return super().connect(root)
"""
ON_SINGLE = {
    "loops": "while True: pass",
    "ignores_the_alarm": "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                         "            while True: pass",
    "exits": "os._exit(3)",
    "segfaults": "import ctypes; ctypes.string_at(0)",
    "allocates_without_bound": "blocks = []\n"
                               "            while True: blocks.append(bytearray(10**7))",
    "swallows_exceptions": "try:\n                while True: pass\n            except Exception:\n"
                           "                return None",
}
WHOLE_FILE = {
    "has_a_syntax_error": "class Solution:\n    def connect(self, root)\n        return root\n",
    "loops_on_import": "while True:\n    pass\n",
    "raises_on_import": "raise RuntimeError('boom')\n",
}
SINGLE_TEST = "test_a_single_node_has_no_next"
LIMITS = {"time_limit_s": 2.5, "memory_limit_mb": 256}


@pytest.fixture(scope="module")
def reports(submit, tmp_path_factory):
    """The report of every misbehaving solution, graded two at a time."""
    folder = tmp_path_factory.mktemp("misbehaving")
    reference = find_exercise("linked_level_tree").solution.read_text()
    sources = {name: reference + MISBEHAVING.format(misbehave=code)
               for name, code in ON_SINGLE.items()}
    sources.update(WHOLE_FILE)
    jobs = {}
    for name, source in sources.items():
        path = folder / f"{name}.py"
        path.write_text(source)
        jobs[name] = submit("linked_level_tree", path, **LIMITS)
    return {name: job.result() for name, job in jobs.items()}


@pytest.mark.parametrize(("name", "phrase"), [
    ("loops", "time limit"),
    ("swallows_exceptions", "time limit"),
    ("ignores_the_alarm", "killed"),
    ("exits", "exited (status 3)"),
    ("segfaults", "crashed (SIGSEGV)"),
    ("allocates_without_bound", "out of memory"),
])
def test_a_misbehaving_test_costs_that_test_alone(reports, name, phrase):
    report = reports[name]
    lost = {test.name: test.message for test in report.tests if not test.passed}
    assert list(lost) == [SINGLE_TEST]
    assert phrase in lost[SINGLE_TEST]
    assert report.score == report.max_score - 1 and len(report.tests) == 12


@pytest.mark.parametrize(("name", "phrase"), [
    ("has_a_syntax_error", "SyntaxError"),
    ("loops_on_import", "time limit"),
    ("raises_on_import", "RuntimeError: boom"),
])
def test_a_file_that_will_not_load_loses_every_test(reports, name, phrase):
    report = reports[name]
    assert report.score == 0 and report.max_score == 22 and len(report.tests) == 12
    assert all(phrase in test.message for test in report.tests), report.tests[0].message


def test_a_file_that_will_not_load_fails_fast(reports):
    assert reports["has_a_syntax_error"].duration_s < 10
    assert reports["loops_on_import"].duration_s < 10  # one time-out, not one per test
