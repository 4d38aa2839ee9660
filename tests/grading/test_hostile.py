"""A solution that attacks the grader scores no more than an honest no-op, and changes nothing
else: not a later grade, not the exercises folder, and it leaves no process behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refimpl.grading import catalogue, find_exercise
from refimpl.grading.catalogue import EXERCISES_ENV
from refimpl.grading.confine import landlock_abi

HOSTILE = ["calls_the_recorders_hooks", "empties_the_failures", "forges_its_own_result",
           "forges_the_records", "patches_a_library", "plants_a_conftest",
           "reads_the_reference", "replaces_the_test_module", "skips_its_tests",
           "starts_a_daemon"]
# Only where Landlock scopes signals (ABI 6+) is the grader safe from a solution killing it;
# elsewhere this one would kill the test run itself.
SIGNALS_SCOPED = landlock_abi() >= 6
if SIGNALS_SCOPED:
    HOSTILE.append("kills_the_keeper")
DAEMON_ENV = "HOSTILE_DAEMON_FILE"  # where the daemon would write, were it able to
needs_landlock = pytest.mark.skipif(landlock_abi() == 0, reason="no Landlock in this kernel")


@pytest.fixture(scope="module")
def graded(submit, solutions_dir, tmp_path_factory):
    """Reports of the no-op, each hostile solution, then the starter and the reference again,
    all against a copy of the exercises folder (so a planted file could harm only the copy)."""
    folder = tmp_path_factory.mktemp("hostile")
    exercises = folder / "exercises"
    shutil.copytree(find_exercise("linked_level_tree").path.parent, exercises)
    mark = folder / "daemon-was-here.txt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(EXERCISES_ENV, str(exercises))
        patch.setenv(DAEMON_ENV, str(mark))
        tree = find_exercise("linked_level_tree")
        noop = submit(tree.name, solutions_dir / "hostile" / "noop.py")
        jobs = {name: submit(tree.name, solutions_dir / "hostile" / f"{name}.py")
                for name in HOSTILE}
        reports = {name: job.result() for name, job in jobs.items()}
        later = submit(tree.name, tree.starter).result(), submit(tree.name, tree.solution).result()
    return {"noop": noop.result(), "reports": reports, "later": later, "exercises": exercises,
            "mark": mark}


@pytest.mark.parametrize("name", HOSTILE)
def test_an_attack_scores_no_more_than_an_honest_no_op(graded, name):
    noop, report = graded["noop"], graded["reports"][name]
    assert noop.score == 5 and noop.max_score == 22  # the no-op passes what it cannot fail
    assert report.score <= noop.score, [(t.name, t.message) for t in report.tests if t.passed]
    assert len(report.tests) == 12


@pytest.mark.parametrize("name", ["replaces_the_test_module", "forges_the_records",
                                  "calls_the_recorders_hooks", "patches_a_library"])
def test_rewriting_the_tests_or_forging_records_voids_the_grade(graded, name):
    report = graded["reports"][name]
    assert report.score == 0
    assert "tampered with the grading" in report.error


@needs_landlock
def test_a_planted_conftest_changes_no_later_grade_and_no_folder(graded):
    starter, reference = graded["later"]
    assert starter.score == 0 and reference.score == reference.max_score == 22
    exercises = graded["exercises"]
    assert set(exercises.rglob("conftest.py")) == {exercises / "conftest.py"}  # its own only
    assert not (find_exercise("linked_level_tree").path / "conftest.py").exists()


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_setsid_daemon_does_not_outlive_grading(graded):
    marker = f"{DAEMON_ENV}={graded['mark']}"
    assert _processes_with(marker) == []
    time.sleep(0.5)  # had one escaped, it would write within 0.1 s
    if landlock_abi():
        assert not graded["mark"].exists(), "the daemon wrote outside its folder"


@pytest.mark.skipif(not SIGNALS_SCOPED, reason="Landlock does not scope signals here")
def test_the_grader_survives_an_attack_on_its_processes(graded):
    report = graded["reports"]["kills_the_keeper"]
    assert report.score == 5 and not report.error  # graded as the no-op it is
    assert os.getpid() > 0  # and this process (the grader) is still here


def test_a_result_forged_from_inside_its_own_test_is_lost(graded):
    report = graded["reports"]["forges_its_own_result"]
    assert report.score == 0
    assert all("ended right after this test" in test.message for test in report.tests)


def test_a_skipped_test_is_not_a_passed_one(graded):
    assert graded["reports"]["skips_its_tests"].score == 0


@needs_landlock
def test_the_reference_is_not_readable_from_a_solution(graded):
    report = graded["reports"]["reads_the_reference"]
    assert report.score == 5


def test_every_exercise_copy_leaves_the_reference_behind(tmp_path):
    from refimpl.grading.child import _copy_exercise

    for exercise in catalogue():
        copy = _copy_exercise(exercise, tmp_path / exercise.name)
        assert (copy / exercise.name / exercise.tests.name).is_file()
        assert not (copy / exercise.name / ".meta").exists()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_grader_killed_mid_run_leaves_no_process_behind(solutions_dir, tmp_path):
    marker = f"{DAEMON_ENV}={tmp_path / 'mark'}"
    # The daemon, and a test that would run for a minute: without the kernel telling the
    # keeper its grader died, both would outlive this test's wait.
    daemon = tmp_path / "daemon_then_loop.py"
    daemon.write_text((solutions_dir / "hostile" / "starts_a_daemon.py").read_text()
                      + "\n\nSolution.connect = lambda self, root: time.sleep(600)\n")
    script = (f"from refimpl.grading import grade\n"
              f"grade('linked_level_tree', {str(daemon)!r}, time_limit_s=60)")
    env = {**os.environ, DAEMON_ENV: str(tmp_path / "mark")}
    grader = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 120
    # The keeper, the test process and the daemon, besides the grader.
    while len([pid for pid in _processes_with(marker) if pid != grader.pid]) < 3:
        assert time.monotonic() < deadline and grader.poll() is None, "no daemon started"
        time.sleep(0.05)
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 20  # far less than the test's minute
    while _processes_with(marker):
        assert time.monotonic() < deadline, f"left behind: {_processes_with(marker)}"
        time.sleep(0.05)
