"""Every exercise: the reference scores full marks and the untouched starter scores zero."""

from __future__ import annotations

import pytest

from refimpl.grading import catalogue

EXERCISES = catalogue()


@pytest.fixture(scope="module")
def reports(submit):
    """(reference report, starter report) per exercise, graded two at a time."""
    jobs = {ex.name: (submit(ex.name, ex.solution), submit(ex.name, ex.starter))
            for ex in EXERCISES}
    return {name: (ref.result(), starter.result()) for name, (ref, starter) in jobs.items()}


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.name)
def test_the_reference_scores_full_marks(reports, exercise):
    reference, _ = reports[exercise.name]
    lost = {test.name: test.message for test in reference.tests if not test.passed}
    assert not lost and not reference.error
    assert reference.score == reference.max_score == exercise.points


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.name)
def test_the_untouched_starter_scores_zero(reports, exercise):
    _, starter = reports[exercise.name]
    assert starter.score == 0 and starter.max_score == exercise.points
    assert all("NotImplementedError" in test.message for test in starter.tests)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.name)
def test_each_exercise_has_the_whole_anatomy(exercise):
    for path in (exercise.readme, exercise.starter, exercise.tests, exercise.solution):
        assert path.is_file(), path
    readme = exercise.readme.read_text()
    assert "<details>" in readme and "refimpl grade" in readme
    assert exercise.difficulty and exercise.topic and exercise.source


def test_the_catalogue_has_the_seed_exercise_and_one_per_part_of_the_stack():
    assert len(EXERCISES) >= 7
    assert "linked_level_tree" in {exercise.name for exercise in EXERCISES}
