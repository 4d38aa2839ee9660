"""`refimpl grade / exercises / practice`: output, the JSON report's shape, errors, progress."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest

from refimpl.cli import main
from refimpl.grading import GradingError, catalogue, find_exercise, grade
from refimpl.grading.catalogue import EXERCISES_ENV, exercises_dir
from refimpl.grading.practice import exercise_of_the_day, load_progress

TREE = find_exercise("linked_level_tree")


@pytest.fixture(scope="module")
def recursive_json(tmp_path_factory, solutions_dir):
    """The JSON report of `refimpl grade` on the recursive solution, and what it printed."""
    folder = tmp_path_factory.mktemp("report")
    path = folder / "report.json"
    solution = solutions_dir / "linked_level_tree" / "recursive.py"
    progress = folder / "practice.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REFIMPL_PRACTICE_FILE", str(progress))
        assert main(["grade", "linked_level_tree", "--solution", str(solution),
                     "--json", str(path)]) == 1  # below full marks
    return json.loads(path.read_text()), load_progress(progress)


def test_the_json_report_has_the_documented_shape(recursive_json):
    report, _ = recursive_json
    assert {"exercise", "score", "max_score", "tests"} <= set(report)
    assert (report["exercise"], report["score"], report["max_score"]) == (
        "linked_level_tree", 20, 22)
    for test in report["tests"]:
        assert {"name", "points", "max_points", "passed", "message"} <= set(test)
        assert test["points"] == (test["max_points"] if test["passed"] else 0)
        assert bool(test["message"]) != test["passed"]
    assert sum(test["points"] for test in report["tests"]) == report["score"]


def test_grading_records_what_passed_as_progress(recursive_json):
    _, progress = recursive_json
    entry = progress["linked_level_tree"]
    assert (entry["score"], entry["max_score"]) == (20, 22)
    assert entry["failed"] == ["test_a_chain_far_deeper_than_the_recursion_limit_is_linked"]
    assert len(entry["passed"]) == 11


def test_grade_prints_a_table_and_the_score(capsys):
    assert main(["grade", "linked_level_tree", "--solution", str(TREE.solution),
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "PASS  A lone root keeps next = None." in out
    assert "score: 22/22" in out


def test_an_unknown_exercise_names_the_field_and_lists_the_catalogue(capsys):
    with pytest.raises(GradingError, match=r"exercise='nope': unknown exercise \(choose from: "):
        grade("nope", TREE.solution)
    assert main(["grade", "nope", "--solution", str(TREE.solution)]) == 2
    assert "linked_level_tree" in capsys.readouterr().err


def test_a_missing_solution_file_names_the_field(tmp_path):
    with pytest.raises(GradingError, match=r"solution='.*missing.py': no such file"):
        grade("linked_level_tree", tmp_path / "missing.py")


def test_exercises_lists_name_topic_difficulty_and_points(capsys):
    assert main(["exercises"]) == 0
    out = capsys.readouterr().out
    for exercise in catalogue():
        assert exercise.name in out and exercise.topic in out
    assert "linked_level_tree  medium          22" in out


def test_the_exercise_of_the_day_is_fixed_by_the_date_and_cycles():
    exercises = catalogue()
    days = [date(2030, 1, 1) + timedelta(days=offset) for offset in range(len(exercises))]
    picks = [exercise_of_the_day(exercises, day).name for day in days]
    assert sorted(picks) == sorted(exercise.name for exercise in exercises)
    assert exercise_of_the_day(exercises, date(2030, 1, 1)).name == picks[0]


def test_practice_shows_todays_exercise_and_its_last_result(capsys, private_progress):
    exercises = catalogue()
    days = (date(2030, 1, 1) + timedelta(days=offset) for offset in range(len(exercises)))
    day = next(d for d in days if exercise_of_the_day(exercises, d).name == "linked_level_tree")
    assert main(["practice", "--date", day.isoformat()]) == 0
    assert "exercise of" in capsys.readouterr().out
    assert main(["grade", "linked_level_tree", "--solution", str(TREE.starter)]) == 1
    capsys.readouterr()
    assert main(["practice", "--date", day.isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"exercise of {day.isoformat()}: linked_level_tree" in out
    assert "last time" in out and "0/22" in out
    assert "failed  test_an_empty_tree_gives_none" in out
    assert str(private_progress) in out


def test_a_damaged_progress_file_counts_as_no_progress(private_progress):
    private_progress.write_text("{not json")
    assert load_progress(private_progress) == {}


def test_the_exercises_folder_can_be_pointed_at(monkeypatch, tmp_path):
    monkeypatch.setenv(EXERCISES_ENV, str(TREE.path.parent))
    assert exercises_dir() == TREE.path.parent
    monkeypatch.setenv(EXERCISES_ENV, str(tmp_path))
    with pytest.raises(GradingError, match=r"REFIMPL_EXERCISES=.*not an exercises folder"):
        exercises_dir()
