"""Limits are checked before a run (named errors); `refimpl grade` exits 1 below its bar; the
channel's judge and the tripwire refuse what an honest child never sends or does."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from refimpl.cli import main
from refimpl.errors import ConfigError
from refimpl.grading import find_exercise, grade
from refimpl.grading.channel import Judge, Tampered, signer
from refimpl.grading.tripwire import Snapshot

TREE = find_exercise("linked_level_tree")


@pytest.mark.parametrize(("limits", "field"), [
    ({"time_limit_s": -1}, "time_limit_s=-1"),
    ({"time_limit_s": float("nan")}, "time_limit_s=nan"),
    ({"time_limit_s": 0}, "time_limit_s=0"),
    ({"time_limit_s": float("inf")}, "time_limit_s=inf"),
    ({"time_limit_s": True}, "time_limit_s=True"),
    ({"memory_limit_mb": -5}, "memory_limit_mb=-5"),
    ({"memory_limit_mb": 1.5}, "memory_limit_mb=1.5"),
])
def test_impossible_limits_are_refused_naming_the_field(limits, field):
    with pytest.raises(ConfigError, match=field):
        grade(TREE.name, TREE.solution, **limits)


@pytest.mark.parametrize("args", [["--time-limit", "-1"], ["--time-limit", "nan"],
                                  ["--time-limit", "0"], ["--memory-limit-mb", "-5"],
                                  ["--min-score", "23"], ["--min-score", "-1"]])
def test_the_cli_refuses_bad_limits_with_status_2(args, capsys):
    assert main(["grade", TREE.name, "--solution", str(TREE.solution), "--no-record",
                 *args]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_json_path_that_cannot_be_written_is_refused_before_grading(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for path in (tmp_path, blocker / "report.json"):
        assert main(["grade", TREE.name, "--solution", str(TREE.solution), "--no-record",
                     "--json", str(path)]) == 2
        err = capsys.readouterr()
        assert "json=" in err.err and "score:" not in err.out  # no test ran


def test_a_practice_file_that_cannot_be_written_is_refused_before_grading(tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setenv("REFIMPL_PRACTICE_FILE", str(tmp_path))  # a folder
    assert main(["grade", TREE.name, "--solution", str(TREE.solution)]) == 2
    err = capsys.readouterr()
    assert "REFIMPL_PRACTICE_FILE=" in err.err and "score:" not in err.out


def test_grade_exits_1_below_full_marks_unless_min_score_allows_it(capsys):
    starter = ["grade", TREE.name, "--solution", str(TREE.starter), "--no-record"]
    assert main(starter) == 1
    assert "score: 0/22" in capsys.readouterr().out
    assert main([*starter, "--min-score", "0"]) == 0


def _events(key: bytes, *events: dict, first_seq: int = 0) -> bytes:
    """What a child with `key` sends for `events`, as bytes off the pipe."""
    read_fd, write_fd = os.pipe()
    send = signer(key, write_fd, first_seq)
    for event in events:
        send(**event)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.read()


COLLECTED = {"event": "collected", "tests": [{"nodeid": "t::a"}, {"nodeid": "t::b"}]}


def test_the_judge_takes_signed_events_in_order_and_a_failure_is_final():
    judge = Judge(key=b"k" * 32)
    judge.feed(_events(judge.key, COLLECTED, {"event": "start", "nodeid": "t::a"},
                       {"event": "failed", "nodeid": "t::a", "message": "boom"},
                       {"event": "result", "nodeid": "t::a", "passed": True, "message": ""}))
    assert judge.results == {"t::a": (False, "boom")}


@pytest.mark.parametrize("forged", [
    b'{"event": "start", "nodeid": "t::a"}\n',  # unsigned, as in the grader's old log
    _events(b"x" * 32, {"event": "start", "nodeid": "t::a"}, first_seq=1),  # another key
    _events(b"k" * 32, {"event": "start", "nodeid": "t::a"}, first_seq=5),  # out of sequence
])
def test_the_judge_refuses_unsigned_foreign_or_unnumbered_events(forged):
    judge = Judge(key=b"k" * 32)
    judge.feed(_events(judge.key, COLLECTED))
    with pytest.raises(Tampered):
        judge.feed(forged)


@pytest.mark.parametrize("story", [
    [{"event": "start", "nodeid": "t::b"}],  # out of turn
    [{"event": "result", "nodeid": "t::a", "passed": True, "message": ""}],  # never started
    [{"event": "start", "nodeid": "t::a"}, {"event": "start", "nodeid": "t::b"}],  # overlap
    [{"event": "start", "nodeid": "t::a"},
     {"event": "result", "nodeid": "t::a", "passed": True, "message": ""},
     {"event": "result", "nodeid": "t::a", "passed": True, "message": ""}],  # twice
])
def test_the_judge_refuses_a_story_no_honest_child_tells(story):
    judge = Judge(key=b"k" * 32)
    with pytest.raises(Tampered):
        judge.feed(_events(judge.key, COLLECTED, *story))


def test_the_judge_refuses_a_flood_without_line_ends():
    judge = Judge(key=b"k" * 32)
    with pytest.raises(Tampered, match="longer than"):
        for _ in range(100):
            judge.feed(b"x" * (1 << 16))


def test_the_tripwire_sees_swapped_code_and_names_added_to_the_tests(monkeypatch):
    module = types.ModuleType("fake_tests")
    exec("def test_x():\n    assert False\n", vars(module))
    monkeypatch.setitem(sys.modules, "fake_tests", module)
    package = types.ModuleType("fake_package")
    monkeypatch.setitem(sys.modules, "fake_package", package)
    snapshot = Snapshot.take([package], strict=[module])
    package.submodule = "a later import"  # a package may gain names
    assert snapshot.changes() == []
    module.len = lambda value: 0  # a test module may not: it would shadow a builtin
    assert snapshot.changes() == ["a name in fake_tests"]
    del module.len
    module.test_x.__code__ = (lambda: None).__code__
    assert snapshot.changes() == ["the code of fake_tests.test_x"]
    assert json.dumps(snapshot.changes())  # plain strings, ready for the channel


def test_without_landlock_the_reference_still_scores_full_marks(monkeypatch):
    from refimpl.grading import runner

    monkeypatch.setattr(runner, "landlock_abi", lambda: 0)  # a kernel without Landlock
    report = grade(TREE.name, TREE.solution)
    assert report.score == report.max_score == 22 and not report.error
